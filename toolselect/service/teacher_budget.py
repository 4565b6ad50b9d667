"""The teacher's hourly budget as every process on the store spends it.

A `Budget` lives in one process's memory. Replicas on one store and `serve --workers` workers
each had their own, so N processes made N times a tenant's `TOOLSELECT_TEACHER_BUDGET_PER_HOUR`
paid calls, and an operator's hourly spend grew with the deployment. Every teacher call is
traced in the store, so each process can see the others': at start `seed` counts the last
hour's billed calls (a restart does not begin a fresh hour), and at every poll `follow` counts
the billed calls other processes traced since (`Budget.elsewhere`). Together they spend about
the budget, over it at most by what the others paid since the last poll. This process's own
calls are told apart by their ids (`record` notes each before the store has it). The global cap
(`TOOLSELECT_TEACHER_GLOBAL_BUDGET_PER_HOUR`) stays each process's: a tenant's store holds only
that tenant's calls.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

import structlog

from toolselect.clock import Clock
from toolselect.oracle.budget import WINDOW_S, Budget
from toolselect.records import OracleCall

log = structlog.get_logger("toolselect.service")

_WINDOW = timedelta(seconds=WINDOW_S)


class CallStore(Protocol):
    """Where teacher calls are traced."""

    async def record_oracle_call(self, call: OracleCall) -> None: ...

    async def oracle_calls(
        self, turn_id: str | None = None, since: datetime | None = None
    ) -> list[OracleCall]: ...


class TeacherCalls:
    """This service's teacher traces and its budget's count of every process's (module
    docstring). `active`: whether a paid call may happen at all; otherwise nothing is read."""

    def __init__(self, store: CallStore, budget: Budget, clock: Clock, *, active: bool) -> None:
        self._store = store
        self._budget = budget
        self._clock = clock
        self._active = active
        if budget.elsewhere_since is None:  # a kept budget goes on from its first start
            budget.elsewhere_since = clock()

    async def record(self, call: OracleCall) -> None:
        """Trace `call` (the oracle's `record_call`), noted as this process's."""
        self._budget.own_calls[call.id] = call.at
        await self._store.record_oracle_call(call)

    async def seed(self) -> None:
        """Count the calls billed in the last hour against a budget this process has not used
        yet: a restart (a crash loop, a deploy) would otherwise begin a fresh hour of paid
        calls. The store holds every replica's calls: a replica started again spends less,
        never more, until the hour has passed."""
        if self._budget.seeded or not self._active:
            return
        now = self._clock()
        calls = await self._store.oracle_calls(since=now - _WINDOW)
        seeded = self._budget.seed((now - c.at).total_seconds() for c in calls if c.billed)
        if seeded:
            log.info("teacher_budget_seeded", calls=seeded, remaining=self._budget.remaining())

    async def follow(self) -> None:
        """Count against the budget the calls other processes billed since it was first started
        (`seed` counted those before), within the hour."""
        budget = self._budget
        if not self._active or budget.elsewhere_since is None:
            return
        now = self._clock()
        since = max(budget.elsewhere_since, now - _WINDOW)
        budget.own_calls = {i: at for i, at in budget.own_calls.items() if at >= since}
        calls = await self._store.oracle_calls(since=since)
        others = (c for c in calls if c.billed and c.id not in budget.own_calls)
        budget.elsewhere((now - c.at).total_seconds() for c in others)
