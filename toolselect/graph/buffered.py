"""A Store wrapper that keeps serving writes while the backend is unreachable.

When a write fails with `StoreUnavailable`, it goes to a bounded in-memory backlog instead of
failing its caller; so do all later writes until the backlog is flushed, so the store sees them
in order. `flush()` (called by the service's maintenance loop) replays turns, then exemplars,
then oracle calls, and stops at the first failure to try again later. Once a call has found
the backend down, other calls fail fast with `StoreUnavailable` instead of each waiting out the
driver's retries, until `flush()` succeeds; only `ping()` and `flush()` probe the backend.
`exemplars_for_queries` (and `exemplar_for_query`) answer from the backlog first and degrade to
"no label" while the backend is down, so the learner's ratchet keeps working.

Bounds: turns and oracle calls beyond their limits drop the oldest (counted and logged);
exemplars are kept per normalised query (the strongest label wins, as in the store) up to a
much larger limit, because a confirmed label is the one thing that must not be lost.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TypeVar

import structlog

from toolselect.errors import StoreError, StoreUnavailable
from toolselect.graph.store import (
    TIER_STRENGTH,
    AnalyticsResult,
    Exemplar,
    ExemplarDelta,
    OracleCall,
    SaveResult,
    Store,
    StoredLabel,
    StoreState,
    Tool,
    Turn,
    UpsertResult,
    check_tier,
    lookup_one,
    replaces,
    save_one,
)
from toolselect.metrics import Metrics
from toolselect.names import normalise_query

log = structlog.get_logger("toolselect.store")

_FLUSH_TURNS = 1000
T = TypeVar("T")


class BufferedStore:
    """`Store` over another store, with a write backlog for outages; see the module docstring."""

    def __init__(
        self,
        inner: Store,
        *,
        max_turns: int = 10_000,
        max_calls: int = 10_000,
        max_exemplars: int = 100_000,
        exemplar_batch: int = 512,
        metrics: Metrics | None = None,
    ) -> None:
        self.inner = inner
        self._max_turns = max_turns
        self._max_calls = max_calls
        self._max_exemplars = max_exemplars
        self._exemplar_batch = max(exemplar_batch, 1)
        self._metrics = metrics or Metrics()
        self._turns: deque[Turn] = deque()
        self._calls: deque[OracleCall] = deque()
        self._exemplars: OrderedDict[str, Exemplar] = OrderedDict()
        self._flush_lock = asyncio.Lock()
        self.last_error: str | None = None

    # -- backlog -------------------------------------------------------------------------

    @property
    def backlog(self) -> int:
        return len(self._turns) + len(self._calls) + len(self._exemplars)

    @property
    def down(self) -> bool:
        """True from a failed call until the next successful flush."""
        return self.last_error is not None

    async def _through(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run a call on the backend, failing fast while it is known to be down."""
        if self.last_error is not None:
            raise StoreUnavailable(self.last_error)
        try:
            return await call()
        except StoreUnavailable as exc:
            self._down(exc, operation)
            raise

    def _down(self, exc: StoreUnavailable, operation: str) -> None:
        if self.last_error is None:
            log.warning("store_down_buffering", operation=operation, error=str(exc))
        self.last_error = str(exc)
        self._metrics.store_errors.labels(operation).inc()

    def _publish(self) -> None:
        self._metrics.backlog.set(self.backlog)

    def _drop(self, kind: str, count: int) -> None:
        self._metrics.backlog_dropped.labels(kind).inc(count)
        log.error("store_backlog_dropped", kind=kind, count=count)

    async def flush(self) -> int:
        """Write the backlog in order; return how many records were written (0 when down)."""
        written = 0
        async with self._flush_lock:
            try:
                while self._turns:
                    batch = [self._turns[i] for i in range(min(_FLUSH_TURNS, len(self._turns)))]
                    written += await self._flush_turns(batch)
                    for _ in batch:
                        self._turns.popleft()
                written += await self._flush_exemplars()
                while self._calls:
                    await self.inner.record_oracle_call(self._calls[0])
                    self._calls.popleft()
                    written += 1
            except StoreUnavailable as exc:
                self.last_error = str(exc)
                return written
            finally:
                self._publish()
        if written:
            log.info("store_backlog_flushed", written=written)
        self.last_error = None
        return written

    async def _flush_turns(self, batch: list[Turn]) -> int:
        """Record a chunk of the backlog; when the store refuses it (not unreachable), record its
        turns one by one and drop only those refused alone, so one bad turn cannot hold the
        whole backlog back forever."""
        try:
            await self.inner.record_turns(batch)
            return len(batch)
        except StoreUnavailable:
            raise
        except Exception as exc:  # any refusal: find the turn that causes it
            log.warning("backlog_turns_retried_alone", turns=len(batch), error=repr(exc))
        written = 0
        for turn in batch:
            try:
                await self.inner.record_turns([turn])
                written += 1
            except StoreUnavailable:
                raise
            except Exception as exc:
                log.error("backlog_turn_refused", turn_id=turn.id, error=repr(exc))
                self._drop("turn_refused", 1)
        return written

    async def _flush_exemplars(self) -> int:
        """Save pending labels in batches, stronger tiers first (so a flush cut short by a new
        outage has landed the labels that matter most)."""
        ordered = sorted(self._exemplars.values(), key=lambda e: -TIER_STRENGTH[e.tier])
        written = 0
        for start in range(0, len(ordered), self._exemplar_batch):
            batch = ordered[start : start + self._exemplar_batch]
            result = await self.inner.save_exemplars(batch)
            for rejected in result.unknown_tool:
                log.warning("backlog_exemplar_rejected", tool=rejected.tool)
            for exemplar in batch:
                # A label queued meanwhile for the same query stays for the next flush.
                if self._exemplars.get(exemplar.query_norm) is exemplar:
                    del self._exemplars[exemplar.query_norm]
            written += len(batch)
        return written

    # -- writes that survive an outage -----------------------------------------------------

    async def record_turns(self, turns: Sequence[Turn]) -> int:
        if not self.backlog and not self.down:
            try:
                return await self.inner.record_turns(turns)
            except StoreUnavailable as exc:
                self._down(exc, "record_turns")
        self._turns.extend(turns)
        excess = len(self._turns) - self._max_turns
        if excess > 0:
            for _ in range(excess):
                self._turns.popleft()
            self._drop("turn", excess)
        self._publish()
        return len(turns)

    async def save_exemplars(self, exemplars: Sequence[Exemplar]) -> SaveResult:
        for exemplar in exemplars:
            check_tier(exemplar)
        if not self.backlog and not self.down:
            try:
                return await self.inner.save_exemplars(exemplars)
            except StoreUnavailable as exc:
                self._down(exc, "save_exemplars")
        # The catalog cannot be checked while down: an unknown tool is rejected at flush.
        changed = tuple(e for e in exemplars if self._pend(e))
        self._publish()
        return SaveResult(changed=changed)

    def _pend(self, exemplar: Exemplar) -> bool:
        """Queue one label under the store's rules; whether it changed the backlog."""
        key = exemplar.query_norm
        pending = self._exemplars.get(key)
        if pending is not None:
            if not replaces(StoredLabel(pending.tool, pending.tier), exemplar):
                return False
            del self._exemplars[key]
        self._exemplars[key] = exemplar
        if len(self._exemplars) > self._max_exemplars:
            self._exemplars.popitem(last=False)
            self._drop("exemplar", 1)
        return True

    async def save_exemplar(self, exemplar: Exemplar) -> bool:
        return await save_one(self, exemplar)

    async def record_oracle_call(self, call: OracleCall) -> None:
        if not self.backlog and not self.down:
            try:
                await self.inner.record_oracle_call(call)
                return
            except StoreUnavailable as exc:
                self._down(exc, "record_oracle_call")
        self._calls.append(call)
        if len(self._calls) > self._max_calls:
            self._calls.popleft()
            self._drop("oracle_call", 1)
        self._publish()

    async def exemplars_for_queries(self, queries: Sequence[str]) -> dict[str, Exemplar]:
        keys = {normalise_query(q) for q in queries}
        pending = {k: self._exemplars[k] for k in keys if k in self._exemplars}
        rest = [k for k in keys if k not in pending]
        if not rest:
            return pending
        try:
            stored = await self._through(
                "exemplars_for_queries", lambda: self.inner.exemplars_for_queries(rest)
            )
        except StoreUnavailable:
            return pending
        return stored | pending

    async def exemplar_for_query(self, query: str) -> Exemplar | None:
        return await lookup_one(self, query)

    # -- everything else passes through ------------------------------------------------------

    @property
    def uri(self) -> str:
        return self.inner.uri

    async def migrate(self) -> None:
        await self.inner.migrate()  # a probe, like ping: it reaches the backend whatever its state

    async def ping(self) -> None:
        await self.inner.ping()

    async def upsert_tools(self, tools: Sequence[Tool], pack: str | None = None) -> UpsertResult:
        return await self._through("upsert_tools", lambda: self.inner.upsert_tools(tools, pack))

    async def list_tools(self, pack: str | None = None) -> list[Tool]:
        return await self._through("list_tools", lambda: self.inner.list_tools(pack))

    async def get_tool(self, name: str) -> Tool | None:
        return await self._through("get_tool", lambda: self.inner.get_tool(name))

    async def delete_tool(self, name: str) -> bool:
        return await self._through("delete_tool", lambda: self.inner.delete_tool(name))

    async def get_turn(self, turn_id: str) -> Turn | None:
        return await self._through("get_turn", lambda: self.inner.get_turn(turn_id))

    async def exemplars_for_tool(self, tool: str) -> list[Exemplar]:
        return await self._through(
            "exemplars_for_tool", lambda: self.inner.exemplars_for_tool(tool)
        )

    async def exemplars_since(self, version: int) -> ExemplarDelta:
        return await self._through("exemplars_since", lambda: self.inner.exemplars_since(version))

    async def delete_exemplar(self, exemplar_id: str) -> bool:
        return await self._through(
            "delete_exemplar", lambda: self.inner.delete_exemplar(exemplar_id)
        )

    async def oracle_calls(self, turn_id: str | None = None) -> list[OracleCall]:
        return await self._through("oracle_calls", lambda: self.inner.oracle_calls(turn_id))

    async def state(self) -> StoreState:
        return await self._through("state", lambda: self.inner.state())

    async def analytics(self, name: str, since: datetime | None = None) -> AnalyticsResult:
        return await self._through("analytics", lambda: self.inner.analytics(name, since))

    async def close(self) -> None:
        if self.backlog:
            try:
                await self.flush()
            except StoreError as exc:
                log.error("store_backlog_lost_at_close", error=str(exc))
            if self.backlog:
                self._drop("at_close", self.backlog)
        await self.inner.close()
