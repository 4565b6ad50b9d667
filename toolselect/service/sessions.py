"""The conversation signals a ranking may use: the session prior, the context and companions.

`SessionSignals` holds, in memory, what a ranking reads without touching the store: the tool
relations (the store's `tool_pairs` and `tool_transitions` counts), each recent session's last
tools (noted as turns are observed, so a rank request may give just its `session_id`), and the
weights fitted on the store's sessions (`learn/session_fit.py`). `refresh` reads the store,
embeds what it has not embedded before and fits on a worker thread; the service's upkeep calls
it when new session turns arrived and the refit interval passed. Until a fit shows a signal
helps, its weight is zero and a ranking is the message alone.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Protocol

import numpy as np
import structlog

from toolselect.clock import Clock
from toolselect.config import Settings
from toolselect.embed import Embedder
from toolselect.errors import ToolselectError
from toolselect.learn.session_fit import SessionFit, SessionWeights, fit_sessions
from toolselect.metrics import Metrics
from toolselect.names import catalog_names
from toolselect.ranker import CentroidRanker
from toolselect.ranker.relations import EMPTY_RELATIONS, Relations
from toolselect.records import AnalyticsResult, Turn, utc
from toolselect.store.session_rules import SessionTail, session_expired

log = structlog.get_logger("toolselect.sessions")

_EMBED_CHUNK = 256
# A burst of new session turns (a tenth of what the last fit saw, at least this many) refits
# before the interval is over, so a fresh store starts using its sessions early.
_GROWTH_FLOOR = 20
# Session tails are read in the background by one reader per service, this many sessions a
# read; this many more may wait, and a ranking beyond them asks for none (a later ranking of its
# session will). A read each, a burst of new session ids waited past the store's deadline on
# Neo4j and made a healthy store count as down; eight at once, they still cost a third of the
# rankings a second (`tests/api/test_session_tail_reads.py`).
TAIL_BATCH = 64
TAIL_WAITING = 1024


class SessionSource(Protocol):
    """What the signals read from the store."""

    async def session_turns(self, limit: int) -> list[Turn]: ...

    async def session_tails(self, session_ids: Sequence[str]) -> dict[str, SessionTail]: ...

    async def analytics(self, name: str) -> AnalyticsResult: ...


class SessionSignals:
    """Relations, recent sessions and fitted weights (thread-safe to note and read)."""

    def __init__(
        self,
        store: SessionSource,
        queries: Embedder,
        ranker: CentroidRanker,
        settings: Settings,
        metrics: Metrics,
        clock: Clock,
    ) -> None:
        self._store = store
        self._clock = clock  # what a session's idle time is measured by, as turns are stamped
        self._queries = queries
        self._ranker = ranker
        self._settings = settings
        self._metrics = metrics
        self.relations: Relations = EMPTY_RELATIONS
        self.fit = SessionFit()
        # Each session's last turn noted here: its tools and when it was observed.
        self._recent: OrderedDict[str, tuple[tuple[str, ...], datetime]] = OrderedDict()
        # Other processes write this store's sessions too (`serve --workers`, replicas on a
        # shared Neo4j): a ranking also reads the session's recorded last turn.
        self._shared = settings.worker_count > 1 or settings.store_kind == "neo4j"
        self._wanted: dict[str, None] = {}  # sessions whose tail is to be read, in order
        self._reader: asyncio.Task[None] | None = None
        self._lock = threading.Lock()
        self._noted = 0  # session turns noted since the last refresh
        self._refreshed_at = float("-inf")
        self._refreshed_names: tuple[str, ...] = ()  # the catalog the relations were read for
        self._vectors: dict[str, np.ndarray] = {}  # request vectors of the last fit's turns
        self._fitted_on: tuple[tuple[str, ...], int] = ((), -1)
        self._task: asyncio.Task[SessionFit] | None = None
        self._publish()

    @property
    def weights(self) -> SessionWeights:
        """The fitted weights, with the pinned ones (settings) in their place."""
        fitted = self.fit.weights
        s = self._settings
        return replace(
            fitted,
            prior=fitted.prior if s.session_prior_weight is None else s.session_prior_weight,
            context=fitted.context if s.context_weight is None else s.context_weight,
        )

    # ---- the observe side ----------------------------------------------------------------

    def note(self, session_id: str | None, tools: Sequence[str], at: datetime) -> None:
        """A turn of `session_id` observed at `at` used `tools`: its session's previous tools
        from now on, kept as the catalog tools they stand for (in the order used), as the
        store's session tail keeps them: the relations count nothing else, and a turn may
        report 64 names of 256 characters, which would hold some 20 KB a session."""
        kept = self._settings.sessions_kept
        if not session_id or kept <= 0:  # "" is no session
            return
        names = self._ranker.snapshot.names
        catalog = catalog_names(names)
        tools = tuple(dict.fromkeys(t for t in map(catalog.resolve, tools) if t is not None))
        with self._lock:
            if names:
                self._remember(session_id, tools, at)
            else:  # no catalog loaded yet (a store down at start): its tail will say more
                self._recent.pop(session_id, None)
            self._noted += 1

    def _remember(self, session_id: str, tools: Sequence[str], at: datetime) -> None:
        """Under the lock: the session's last turn, the oldest sessions forgotten past the bound."""
        self._recent[session_id] = (tuple(tools), at)
        self._recent.move_to_end(session_id)
        while len(self._recent) > self._settings.sessions_kept:
            self._recent.popitem(last=False)

    def previous(self, session_id: str | None) -> tuple[str, ...]:
        """The tools of the session's last turn noted here (none when unknown, or when that
        turn is older than `TOOLSELECT_SESSION_IDLE`: the session has expired, and its next turn
        starts it afresh). Never waits on the store: where it may know more (a session this
        process never noted, or one other processes write too: `serve --workers`, replicas on
        a shared Neo4j), the session's recorded last turn is read in the background into the
        memory, for the next ranking (unless `TAIL_WAITING` sessions wait for theirs: then a
        later ranking of it asks again)."""
        if not session_id:
            return ()
        with self._lock:
            noted = self._recent.get(session_id)
        if (noted is None or self._shared) and self._settings.sessions_kept > 0:
            self._read_tail(session_id)
        if noted is None or session_expired(noted[1], self._clock(), self._settings.session_idle_s):
            return ()
        return noted[0]

    def _read_tail(self, session_id: str) -> None:
        if session_id in self._wanted or len(self._wanted) >= TAIL_WAITING:
            return
        self._wanted[session_id] = None
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._take_tails(), name="toolselect-session-tails")

    async def _take_tails(self) -> None:
        """The store's last turns of the wanted sessions into the memory, each when later than
        the noted, `TAIL_BATCH` sessions a read until none is wanted (a failed read forgets its
        sessions: a later ranking of one asks again)."""
        while self._wanted:
            sessions = list(itertools.islice(self._wanted, TAIL_BATCH))
            try:
                stored = await self._store.session_tails(sessions)
            except ToolselectError:
                stored = {}
            finally:
                for session_id in sessions:
                    self._wanted.pop(session_id, None)
            with self._lock:
                for session_id, tail in stored.items():
                    noted = self._recent.get(session_id)
                    if tail.at is not None and (noted is None or utc(noted[1]) < utc(tail.at)):
                        self._remember(session_id, tail.tools, tail.at)

    # ---- refits ---------------------------------------------------------------------------

    def restore(self, relations: Relations, fit: SessionFit) -> None:
        """Rank with the relations and fit a catalog snapshot kept (the store did not answer at
        start), until the first refresh reads the store's."""
        self.relations, self.fit = relations, fit
        self._publish()

    def due(self) -> bool:
        """Whether the upkeep should start a refresh now: the interval passed, session turns
        arrived, or the catalog changed (a deleted tool's counts left the store)."""
        if self._task is not None and not self._task.done():
            return False
        if self._ranker.snapshot.names is not self._refreshed_names:  # a fold keeps the names
            return True
        since = time.monotonic() - self._refreshed_at
        if since >= self._settings.session_refit_s:
            return True
        return self._noted >= max(_GROWTH_FLOOR, self.fit.turns // 10) and since >= 1.0

    def start_refresh(self) -> None:
        """`refresh` in the background (one at a time); failures are logged, not raised."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.refresh(), name="toolselect-session-fit")
            self._task.add_done_callback(_log_failure)

    async def refresh(self) -> SessionFit:
        """Read the relations and the recent session turns, and refit when the turns or the
        ranker's centroids changed."""
        self._refreshed_at = time.monotonic()
        self._refreshed_names = self._ranker.snapshot.names
        with self._lock:
            self._noted = 0
        pairs = await self._store.analytics("tool_pairs")
        steps = await self._store.analytics("tool_transitions")
        self.relations = Relations(
            {(a, b): n for a, b, n in pairs.rows}, {(s, d): n for s, d, n, _ in steps.rows}
        )
        limit = self._settings.session_fit_turns
        turns = await self._store.session_turns(limit) if limit > 0 else []
        # The same turns against the same centroids fit the same weights: skip the work.
        basis = (tuple(t.id for t in turns), self._ranker.version)
        if basis != self._fitted_on or not turns:
            self.fit = await self._fit(turns)
            self._fitted_on = basis
            self._metrics.session_fits.labels(self.fit.result).inc()
            log.info(
                "session_fit",
                turns=self.fit.turns,
                follow_ups=self.fit.follow_ups,
                prior=self.fit.weights.prior,
                context=self.fit.weights.context,
                companion_share=self.fit.weights.companion_share,
                reason=self.fit.reason,
            )
        self._publish()
        return self.fit

    async def _fit(self, turns: list[Turn]) -> SessionFit:
        if not turns:
            return SessionFit()
        missing = [t for t in turns if t.id not in self._vectors]
        for start in range(0, len(missing), _EMBED_CHUNK):
            chunk = missing[start : start + _EMBED_CHUNK]
            vectors = await self._queries.embed([t.request for t in chunk])
            for turn, vector in zip(chunk, vectors, strict=True):
                self._vectors[turn.id] = np.asarray(vector, dtype=np.float32)
        self._vectors = {t.id: self._vectors[t.id] for t in turns}
        matrix = np.vstack([self._vectors[t.id] for t in turns])
        snapshot = self._ranker.snapshot
        return await asyncio.to_thread(
            partial(fit_sessions, idle_s=self._settings.session_idle_s),
            turns,
            matrix,
            np.asarray(snapshot.matrix),
            snapshot.names,
        )

    def payload(self) -> dict[str, object]:
        """The conversation signals' part of `GET /v1/analytics/learning`."""
        fit, w, s = self.fit, self.weights, self._settings

        def measure(value: float | None) -> float | None:
            return None if value is None else round(value, 4)

        return {
            "prior": {"weight": w.prior, "source": _source(s.session_prior_weight)},
            "context": {
                "weight": w.context,
                "source": _source(s.context_weight),
                "below_margin": None if math.isinf(w.context_margin) else w.context_margin,
            },
            "companions": {
                "least_share": w.companion_share,
                "precision": measure(fit.companion_precision),
                "next_ranks_precision": measure(fit.next_precision),
            },
            "sessions": fit.sessions,
            "turns": fit.turns,
            "follow_ups": fit.follow_ups,
            "follow_up_score": {
                "message_alone": measure(fit.share_alone),
                "fitted": measure(fit.share_fitted),
            },
            "all_needed_shown": {
                "top_k": measure(fit.all_alone),
                "with_companions": measure(fit.all_with_companions),
            },
            "relations": {"pairs": self.relations.pairs, "transitions": self.relations.transitions},
            "reason": fit.reason,
        }

    async def close(self) -> None:
        tasks = [task for task in (self._reader, self._task) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _publish(self) -> None:
        w = self.weights
        gauge = self._metrics.session_weight
        gauge.labels("prior").set(w.prior)
        gauge.labels("context").set(w.context)
        gauge.labels("companion_share").set(w.companion_share or 0.0)


def _source(pinned: float | None) -> str:
    return "fitted" if pinned is None else "pinned"


def _log_failure(task: asyncio.Task[SessionFit]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("session_fit_failed", error=str(task.exception()))
