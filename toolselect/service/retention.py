"""The upkeep's retention pass: what the store keeps is bounded in age without waiting for a
write.

Labels of the loop older than `TOOLSELECT_EXEMPLAR_MAX_AGE_DAYS` are expired by the same pass a
save ends with (`Store.expire_exemplars`, `store/rules.retention_plan`), so a quiet tenant's old
labels stop counting too, and the live index folds their removal at once (a poll of the store's
version, as for any replica's change). Turns observed more than `TOOLSELECT_TURN_MAX_AGE_DAYS`
ago, and teacher calls traced as long ago, are deleted a bounded batch per transaction
(`Store.delete_turns`, with the sessions whose last turn went: expired for good), so a backlog
(a first pass over years of turns) never holds a long transaction, nor the upkeep for long:
past `PASS_SECONDS` of batches the rest waits for the next tick. Ages are the service's clock,
which stamps the turns and labels.
"""

from __future__ import annotations

import time
from datetime import timedelta

import structlog

from toolselect.clock import Clock
from toolselect.config import Settings
from toolselect.learn.refused import Refused
from toolselect.metrics import Metrics
from toolselect.service.index import LiveIndex
from toolselect.store.port import RetentionStore

log = structlog.get_logger("toolselect.service")

# How often a service runs the pass once it has caught up: one index seek for labels, one per
# kind for turns and calls, when nothing is due.
RETENTION_CHECK_S = 600.0
# Turns (and, apart, teacher calls) per transaction: about 0.26 s a batch on Neo4j, 8 ms on
# SQLite, on 2 busy cores. Batches go on while the pass has run less than `PASS_SECONDS`, so
# the upkeep's other work (polls, the spool's replay) waits at most about that long behind one.
TURN_BATCH = 1_000
PASS_SECONDS = 1.0


class RetentionPass:
    """One tenant's retention, run by its service's upkeep while the store is up and its spool
    replayed (`Service._maintain`)."""

    def __init__(
        self,
        store: RetentionStore,
        index: LiveIndex,
        refused: Refused,
        settings: Settings,
        clock: Clock,
        metrics: Metrics,
        *,
        batch: int = TURN_BATCH,
        seconds: float = PASS_SECONDS,
    ) -> None:
        self._store = store
        self._index = index
        self._refused = refused
        self._settings = settings
        self._clock = clock
        self._metrics = metrics
        self._batch = max(batch, 1)
        self._seconds = seconds

    async def run(self) -> bool:
        """Expire the labels past their age and fold their removal into the ranker, then forget
        the refused turns past theirs and delete batches of turns past it for about `seconds`
        (one at least). Whether turns are left (the upkeep then runs it again at its next tick
        rather than in `RETENTION_CHECK_S`)."""
        now = self._clock()
        expired = await self._store.expire_exemplars(now)
        if expired:
            self._metrics.retention_deleted.labels("label").inc(expired)
            await self._index.refresh()
        max_age = self._settings.turn_max_age_days
        if max_age is None:
            return False
        before = now - timedelta(days=max_age)
        self._refused.forget_before(before)  # before their turns go: never recorded again
        started = time.monotonic()
        deleted = sessions = 0
        left = True
        while left and (not deleted or time.monotonic() - started < self._seconds):
            gone = await self._store.delete_turns(before, self._batch)
            deleted += gone.turns + gone.calls
            sessions += gone.sessions
            left = gone.full(self._batch)
        if deleted:
            self._metrics.retention_deleted.labels("turn").inc(deleted)
            self._metrics.retention_deleted.labels("session").inc(sessions)
            log.info(
                "turns_deleted",
                records=deleted,
                sessions=sessions,
                before=before.isoformat(),
                more=left,
            )
        return left
