"""A Store wrapper that keeps serving writes while the backend is unreachable.

When a write fails with `StoreUnavailable`, or gets no answer within `write_timeout_s` (a hung
store raises nothing), it goes to the durable local spool (`toolselect.store.spool`) instead of
failing its caller, and the caller is answered only once the spool has it on disk; so do all later writes until the spool is replayed, so the store sees
them in order. `flush()` (called by the service's maintenance loop, and at connect, so a spool a
crashed process left is replayed after a restart) replays the spool in append order and stops
at the first failure to try again later; a record leaves the spool only after the store took it.
Once a call has found the backend down, other calls fail fast with `StoreUnavailable` instead of
each waiting out the driver's retries, until `flush()` succeeds; only `ping()` and `flush()`
probe the backend. `exemplars_for_queries` (and `exemplar_for_query`) answer from the spool
first and degrade to "no label" while the backend is down, so the learner's ratchet works.

Bounds are the spool's (turns dropped first, labels last); drops are counted and logged here.
The spool runs on one thread of its own, which keeps its appends in call order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from typing import TypeVar

import structlog

from toolselect.errors import StoreError, StoreUnavailable
from toolselect.metrics import Metrics
from toolselect.names import normalise_query
from toolselect.records import (
    AnalyticsResult,
    ApiKey,
    Exemplar,
    ExemplarDelta,
    OracleCall,
    SaveResult,
    StoreState,
    Tool,
    Turn,
    TurnsDeleted,
    UpsertResult,
)
from toolselect.store.port import Store
from toolselect.store.rules import check_tiers
from toolselect.store.session_rules import SessionTail
from toolselect.store.spool import KINDS, Dropped, Entry, Spool, replay_runs

log = structlog.get_logger("toolselect.store")

_FLUSH_RECORDS = 1000
_MEMORY_SPOOL_BYTES = 64 << 20
T = TypeVar("T")


class BufferedStore:
    """`Store` over another store, with a durable write spool for outages (module docstring).
    Without a `spool`, an in-memory one is used (tests, tools): bounded, not durable."""

    def __init__(
        self,
        inner: Store,
        *,
        spool: Spool | None = None,
        exemplar_batch: int = 512,
        metrics: Metrics | None = None,
        write_timeout_s: float = 10.0,
    ) -> None:
        self.inner = inner
        self._write_timeout_s = write_timeout_s
        self.spool = spool or Spool.open(":memory:", max_bytes=_MEMORY_SPOOL_BYTES)
        self._exemplar_batch = max(exemplar_batch, 1)
        self._metrics = metrics or Metrics()
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolselect-spool")
        self._flush_lock = asyncio.Lock()
        self.last_error: str | None = None
        # Queries whose spooled human label the replay did not write or the spool's bound
        # dropped (for `LiveIndex.settle`).
        self.unsettled: set[str] = set()
        self._publish()

    # -- spool ---------------------------------------------------------------------------

    @property
    def backlog(self) -> int:
        """Records waiting in the spool (as last counted by this process)."""
        return sum(self.spool.depth.values())

    @property
    def down(self) -> bool:
        """True from a failed call until the next successful flush."""
        return self.last_error is not None

    async def _on_spool(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._io, call)

    async def _through(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run a call on the backend, failing fast while it is known to be down."""
        if self.last_error is not None:
            raise StoreUnavailable(self.last_error)
        try:
            return await call()
        except StoreUnavailable as exc:
            self._down(exc, operation)
            raise

    async def _bounded(self, operation: str, call: Awaitable[T]) -> T:
        """`call`, or `StoreUnavailable` once it has waited `write_timeout_s`: a hung store
        raises nothing, and its writes would hold the learner until it wakes. What the store
        may still commit after the deadline is replayed from the spool (turns and oracle calls
        are keyed by id; a usage label's sightings but its last count again: see spool.py)."""
        try:
            async with asyncio.timeout(self._write_timeout_s):
                return await call
        except TimeoutError:
            raise StoreUnavailable(
                f"{operation}: no answer within {self._write_timeout_s:g} s"
            ) from None

    def _down(self, exc: StoreUnavailable, operation: str) -> None:
        if self.last_error is None:
            log.warning("store_down_spooling", operation=operation, error=str(exc))
        self.last_error = str(exc)
        self._metrics.store_errors.labels(operation).inc()

    def _publish(self) -> None:
        self._metrics.backlog.set(self.backlog)
        for kind in KINDS:
            self._metrics.spool_depth.labels(kind).set(self.spool.depth[kind])

    def _drop(self, kind: str, count: int) -> None:
        self._metrics.backlog_dropped.labels(kind).inc(count)
        if kind == "exemplar":
            log.error("spool_labels_dropped", count=count, spool=self.spool.path)
        else:
            log.warning("spool_records_dropped", kind=kind, count=count, spool=self.spool.path)

    def _dropped(self, dropped: Dropped) -> None:
        for kind, count in dropped.counts.items():
            self._drop(kind, count)
        self.unsettled |= dropped.human  # folded when spooled, now lost
        self._publish()

    async def flush(self) -> int:
        """Replay the spool in order; return how many records were written (0 when down)."""
        written = 0
        async with self._flush_lock, self.spool.replay_lock.held():
            try:
                while entries := await self._on_spool(lambda: self.spool.head(_FLUSH_RECORDS)):
                    for run in replay_runs(entries):
                        took = await self._bounded("replay", self._replay(run))
                        written += took
                        await self._on_spool(partial(self.spool.remove, run))
                        self._metrics.spool_replayed.labels(run[0].kind).inc(took)
                        self._publish()
            except StoreUnavailable as exc:
                self.last_error = str(exc)
                return written
            finally:
                self._publish()
        if written:
            log.info("spool_replayed", written=written)
        self.last_error = None
        return written

    async def _replay(self, run: list[Entry]) -> int:
        """Write one run of records of one kind; how many the store took."""
        turns = [e.record for e in run if isinstance(e.record, Turn)]
        if turns:
            return await self._flush_turns(turns)
        calls = [e.record for e in run if isinstance(e.record, OracleCall)]
        for call in calls:
            await self.inner.record_oracle_call(call)
        labels = [e.record for e in run if isinstance(e.record, Exemplar)]
        return len(calls) + await self._replay_labels(labels)

    async def _replay_labels(self, labels: list[Exemplar]) -> int:
        """Write spooled labels as `replayed`; how many the store took. It refuses a label whose
        tool was deleted meanwhile, and leaves a human one a later stored human label replaced."""
        refused: list[Exemplar] = []
        stale: list[Exemplar] = []
        for start in range(0, len(labels), self._exemplar_batch):
            batch = labels[start : start + self._exemplar_batch]
            result = await self.inner.save_exemplars(batch, replayed=True)
            refused += result.unknown_tool
            stale += result.overtaken
        self._refused("exemplar_overtaken", stale)
        self._refused("exemplar_refused", refused)
        return len(labels) - len(refused) - len(stale)

    def _refused(self, kind: str, labels: Sequence[Exemplar]) -> None:
        """Spooled labels the replay does not write: logged, counted, a human's left to settle."""
        for label in labels:
            log.warning("spooled_exemplar_rejected", tool=label.tool, reason=kind)
        if labels:
            self._drop(kind, len(labels))
        self.unsettled.update(e.query_norm for e in labels if e.tier == "feedback")

    async def _flush_turns(self, batch: list[Turn]) -> int:
        """Record a run of spooled turns; when the store refuses it (not unreachable), record
        its turns one by one and drop only those refused alone, so one bad turn cannot hold
        the whole spool back forever."""
        try:
            await self.inner.record_turns(batch)
            return len(batch)
        except StoreUnavailable:
            raise
        except Exception as exc:  # any refusal: find the turn that causes it
            log.warning("spooled_turns_retried_alone", turns=len(batch), error=repr(exc))
        written = 0
        for turn in batch:
            try:
                await self.inner.record_turns([turn])
                written += 1
            except StoreUnavailable:
                raise
            except Exception as exc:
                log.error("spooled_turn_refused", turn_id=turn.id, error=repr(exc))
                self._drop("turn_refused", 1)
        return written

    # -- writes that survive an outage -----------------------------------------------------

    async def record_turns(self, turns: Sequence[Turn]) -> int:
        if not self.backlog and not self.down:
            try:
                return await self._bounded("record_turns", self.inner.record_turns(turns))
            except StoreUnavailable as exc:
                self._down(exc, "record_turns")
        self._dropped(await self._on_spool(lambda: self.spool.append(turns)))
        return len(turns)

    async def save_exemplars(
        self, exemplars: Sequence[Exemplar], *, replayed: bool = False
    ) -> SaveResult:
        check_tiers(exemplars)
        if not self.backlog and not self.down:
            try:
                saving = self.inner.save_exemplars(exemplars, replayed=replayed)
                return await self._bounded("save_exemplars", saving)
            except StoreUnavailable as exc:
                self._down(exc, "save_exemplars")
        # The catalog cannot be checked while down: an unknown tool is rejected at replay.
        changed, dropped = await self._on_spool(lambda: self.spool.append_labels(exemplars))
        self._dropped(dropped)
        return SaveResult(changed=tuple(changed))

    async def record_oracle_call(self, call: OracleCall) -> None:
        if not self.backlog and not self.down:
            try:
                await self._bounded("record_oracle_call", self.inner.record_oracle_call(call))
                return
            except StoreUnavailable as exc:
                self._down(exc, "record_oracle_call")
        self._dropped(await self._on_spool(lambda: self.spool.append([call])))

    async def keep_turns(self, turns: Sequence[Turn]) -> None:
        """Append turns to the spool without trying the store: a stopping service's turns the
        learner never processed, which cannot wait out a store that may hang; `close` replays
        them when the store answers, else the next start does (`SpoolError` if it cannot)."""
        self._dropped(await self._on_spool(lambda: self.spool.append(turns)))

    async def exemplars_for_queries(self, queries: Sequence[str]) -> dict[str, Exemplar]:
        keys = {normalise_query(q) for q in queries}
        pending: dict[str, Exemplar] = {}
        if self.spool.depth["exemplar"]:
            pending = await self._on_spool(lambda: self.spool.pending_labels(keys))
        rest = [k for k in keys if k not in pending]
        if not rest:
            return pending
        try:
            stored = await self._through(
                "exemplars_for_queries",
                lambda: self._bounded(
                    "exemplars_for_queries", self.inner.exemplars_for_queries(rest)
                ),
            )
        except StoreUnavailable:
            return pending
        return stored | pending

    async def recorded_turn_ids(self, turn_ids: Sequence[str]) -> set[str]:
        """The stored ones among `turn_ids`; none while the store is down (the spool is not
        searched: a label's own turn id still keeps a plain resend from counting twice)."""
        try:
            return await self._through(
                "recorded_turn_ids",
                lambda: self._bounded("recorded_turn_ids", self.inner.recorded_turn_ids(turn_ids)),
            )
        except StoreUnavailable:
            return set()

    async def session_tails(self, session_ids: Sequence[str]) -> dict[str, SessionTail]:
        """Empty while the store is down (a ranking then goes without the stored tails)."""
        try:
            return await self._through(
                "session_tails",
                lambda: self._bounded("session_tails", self.inner.session_tails(session_ids)),
            )
        except StoreUnavailable:
            return {}

    async def undecided_turns(self, before: datetime, limit: int) -> list[Turn]:
        """None while the store is down: the turns are closed once it is back."""
        try:
            return await self._through(
                "undecided_turns",
                lambda: self._bounded("undecided_turns", self.inner.undecided_turns(before, limit)),
            )
        except StoreUnavailable:
            return []

    async def refused_turns(self, before: datetime, limit: int) -> list[Turn]:
        """`StoreUnavailable` while the store is down; the spool is not searched: the service
        asks only once it is replayed (a spooled decision would not be seen)."""
        return await self._through(
            "refused_turns",
            lambda: self._bounded("refused_turns", self.inner.refused_turns(before, limit)),
        )

    # -- everything else passes through ------------------------------------------------------

    @property
    def uri(self) -> str:
        return self.inner.uri

    @property
    def tenant(self) -> str:
        """The inner store's tenant (a spool holds one tenant's writes: one spool per tenant)."""
        return self.inner.tenant

    async def migrate(self, *, reader: bool = False) -> None:
        await self.inner.migrate(reader=reader)  # a probe, like ping: whatever its state

    async def ping(self) -> None:
        await self.inner.ping()

    async def upsert_tools(self, tools: Sequence[Tool], pack: str | None = None) -> UpsertResult:
        return await self._through("upsert_tools", lambda: self.inner.upsert_tools(tools, pack))

    async def list_tools(self, pack: str | None = None) -> list[Tool]:
        return await self._through("list_tools", lambda: self.inner.list_tools(pack))

    async def get_tool(self, name: str) -> Tool | None:
        return await self._through("get_tool", lambda: self.inner.get_tool(name))

    async def _replay_first(self) -> None:
        """Replay the spool (any process's of the data folder) before a removal, so a replay
        never writes back what was removed after it was spooled (failing, the removal fails)."""
        if not self.down and await self._on_spool(self.spool.recount) > 0:
            await self.flush()

    async def delete_tool(self, name: str) -> bool:
        await self._replay_first()
        return await self._through("delete_tool", lambda: self.inner.delete_tool(name))

    async def get_turn(self, turn_id: str) -> Turn | None:
        return await self._through("get_turn", lambda: self.inner.get_turn(turn_id))

    async def session_turns(self, limit: int) -> list[Turn]:
        return await self._through("session_turns", lambda: self.inner.session_turns(limit))

    async def exemplars_for_tool(self, tool: str) -> list[Exemplar]:
        return await self._through(
            "exemplars_for_tool", lambda: self.inner.exemplars_for_tool(tool)
        )

    async def exemplars_since(self, version: int) -> ExemplarDelta:
        return await self._through("exemplars_since", lambda: self.inner.exemplars_since(version))

    async def delete_exemplar(self, exemplar_id: str) -> bool:
        await self._replay_first()
        return await self._through(
            "delete_exemplar", lambda: self.inner.delete_exemplar(exemplar_id)
        )

    async def oracle_calls(
        self, turn_id: str | None = None, since: datetime | None = None
    ) -> list[OracleCall]:
        """The store's calls and the spooled ones it does not have yet: a restart seeds the
        teacher's hourly budget from them, and calls an outage spooled were paid for all the
        same (a spool replayed behind a ready start would otherwise be spent again)."""
        stored = await self._through(
            "oracle_calls", lambda: self.inner.oracle_calls(turn_id, since)
        )
        if not self.spool.depth["oracle_call"]:
            return stored
        known = {call.id for call in stored}
        spooled = [
            call
            for call in await self._on_spool(self.spool.pending_oracle_calls)
            if call.id not in known
            and (turn_id is None or call.turn_id == turn_id)
            and (since is None or call.at >= since)
        ]
        return sorted([*stored, *spooled], key=lambda call: call.at) if spooled else stored

    async def exists(self) -> bool:
        """True with a backlog (the spool holds the tenant's data), else the store's answer."""
        return bool(self.backlog) or await self._through("exists", lambda: self.inner.exists())

    async def state(self) -> StoreState:
        return await self._through("state", lambda: self.inner.state())

    # Retention is never spooled: it fails fast while the store is down (the upkeep skips it).

    async def expire_exemplars(self, now: datetime) -> int:
        return await self._through("expire_exemplars", lambda: self.inner.expire_exemplars(now))

    async def delete_turns(self, before: datetime, limit: int) -> TurnsDeleted:
        return await self._through("delete_turns", lambda: self.inner.delete_turns(before, limit))

    async def analytics(self, name: str, since: datetime | None = None) -> AnalyticsResult:
        return await self._through("analytics", lambda: self.inner.analytics(name, since))

    # API keys are never spooled: writing one fails while down; the registry keeps those it read.

    async def save_key(self, key: ApiKey) -> None:
        await self._through("save_key", lambda: self.inner.save_key(key))

    async def revoke_key(self, key_id: str) -> bool:
        return await self._through("revoke_key", lambda: self.inner.revoke_key(key_id))

    async def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        return await self._through("list_keys", lambda: self.inner.list_keys(tenant))

    async def active_keys(self) -> list[ApiKey]:
        return await self._through("active_keys", lambda: self.inner.active_keys())

    async def close(self, within_s: float | None = None) -> None:
        """Replay the spool into a store not known to be down, for at most `within_s` seconds
        (a shutdown's grace: a store that never answered since the start is not known down,
        and its driver retried for seconds), then close; what is left waits for the next
        start (a replay cut short is replayed again from its last removal)."""
        try:
            if self.backlog and not self.down:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(within_s):
                        await self.flush()
            if self.backlog:
                # Kept on disk: the next start replays it.
                log.warning("spool_kept_at_close", records=self.backlog, spool=self.spool.path)
        except StoreError as exc:
            log.error("spool_flush_failed_at_close", error=str(exc))
        finally:
            await self._on_spool(self.spool.close)
            self._io.shutdown(wait=True)
            await self.inner.close()
