"""The service: its parts (built by `compose`) and their lifetime.

`Service.start(settings)` opens the spool, the store and the embedder, composes the parts and
connects (migrate, replay the spool, load the catalog). Routes, the CLI and the MCP server
call the three facades, `ranking`, `catalog` and `learning`, plus `check_ready` and `close`
here; the parts stay reachable as attributes for tests. Ranking reads only the in-memory
ranker, never the store.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import structlog
from threadpoolctl import threadpool_limits

from toolselect.catalog import load_demo_catalog
from toolselect.clock import Clock, utc_now
from toolselect.config import Settings, ignored_variables
from toolselect.embed import embedder_for
from toolselect.errors import NotReady, SpoolError, StoreUnavailable, ToolselectError
from toolselect.file_lock import FileLock
from toolselect.keys import DEFAULT_TENANT, tenant_file
from toolselect.learn.refused import Refused, RefusedTurn, labelled_meanwhile
from toolselect.metrics import Metrics
from toolselect.oracle.budget import Budget
from toolselect.records import Turn
from toolselect.service.index import Progress
from toolselect.service.parts import Parts, build_teacher, compose
from toolselect.service.reachability import Reachability
from toolselect.service.retention import RETENTION_CHECK_S
from toolselect.service.snapshot import SnapshotKeeper, snapshot_path
from toolselect.store.factory import open_store
from toolselect.store.spool import Spool

# How often the store is asked for teacher turns a stopped process left undecided
# (`Labeller.close_abandoned`): one indexed read of the few such turns.
ABANDONED_CHECK_S = 600.0

log = structlog.get_logger("toolselect.service")


class Service:
    """A started toolselect: the facades over one store, one embedder, one ranker."""

    def __init__(self, parts: Parts, beside: Reachability | None = None) -> None:
        self.parts = parts
        self.settings = parts.settings
        self.metrics = parts.metrics
        self.store = parts.store
        self.embedder = parts.embedder
        self.ranker = parts.ranker
        self.tuner = parts.tuner
        self.index = parts.index
        self.oracle = parts.oracle
        self.learner = parts.learner
        self.ranking = parts.ranking
        self.catalog = parts.catalog
        self.learning = parts.learning
        self.sessions = parts.sessions
        self.keys = parts.keys
        self.retention = parts.retention
        self.reachability = Reachability(parts.store, parts.metrics, beside)
        self._maintenance: asyncio.Task[None] | None = None
        self._watching: asyncio.Task[None] | None = None
        self._owns_models = True
        self._snapshots: SnapshotKeeper | None = None  # Neo4j only: see service/snapshot.py
        # Every other tenant's teacher budget (on the `default` service), kept when a tenant's
        # service is closed and started again: its hour of paid calls is not reset by a restart.
        self.teacher_budgets: dict[str, Budget] = {}
        # And the turns each budget refused, asked about once it has room: not lost with it.
        self.teacher_refused: dict[str, Refused] = {}
        # Turns observed before this are a predecessor's (`_take_back_refused`); set once the
        # upkeep took back those its budget refused (a test, or a caller, may wait on it).
        self._started_at = parts.clock()
        self.refused_taken_back = asyncio.Event()
        # Taken back by one service of the tenant per data folder: each worker asked them all.
        where = parts.store.spool.path
        self._take_back = FileLock(None if where == ":memory:" else f"{where}.take-back")

    @classmethod
    async def start(
        cls,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        wait_for_store: bool = False,
        clock: Clock = utc_now,
        load_progress: Progress | None = None,
        tenant: str = DEFAULT_TENANT,
        beside: Service | None = None,
        upkeep: bool = True,
    ) -> Service:
        """Open the adapters, compose the parts, then load the catalog and exemplars.

        With `wait_for_store` (the server), an unreachable store does not stop the start: the
        service answers `not_ready` and keeps connecting in the background; otherwise (the CLI)
        `StoreUnavailable` is raised at once; without `upkeep` (a one-shot command) no background
        upkeep runs, which may delete old turns and ask the teacher about refused ones.
        `load_progress` hears of the catalog's embedding.
        `tenant` names whose store and spool file (`keys.tenant_file`) to open; `beside` is the
        process's `default` service when `TenantServices` starts another tenant's, which then
        shares its embedder and vector cache (the model loaded once, one connection to the
        file; closed by their owner), its metrics registry (labelled with this tenant), its
        global teacher budget and its Neo4j driver, whose outages they log as one (`StoreOutages`).
        """
        # One BLAS thread: ranking is a small matrix-vector product, where a second thread buys
        # nothing at the median and multiplies the p99 whenever the other core is busy.
        threadpool_limits(1, user_api="blas")
        if beside is None:  # once a process: a tenant's service reads the same environment
            for problem in ignored_variables():
                log.warning("setting_ignored", problem=problem)
        # Before the store: a spool that cannot be used stops the start (it may hold labels).
        # On a thread of its own, joined here: the loop's default pool would outlive `close`.
        with ThreadPoolExecutor(1, thread_name_prefix="toolselect-spool-open") as opener:
            spool = await asyncio.get_running_loop().run_in_executor(
                opener,
                partial(
                    Spool.open,
                    tenant_file(settings.spool_path, tenant),
                    max_bytes=settings.spool_max_bytes,
                ),
            )
        if any(spool.depth.values()):
            log.info("spool_pending_at_start", spool=spool.path, **spool.depth)
        try:
            store = await open_store(
                settings,
                verify=not wait_for_store,
                tenant=tenant,
                beside=beside.store.inner if beside is not None else None,
                clock=clock,
            )
        except BaseException:
            spool.close()
            raise
        if beside is not None:
            metrics = beside.metrics.for_tenant(tenant)
        parts = compose(
            settings,
            store,
            beside.embedder if beside is not None else embedder_for(settings),
            metrics=metrics,
            teacher=build_teacher(settings),
            spool=spool,
            clock=clock,
            load_progress=load_progress,
            teacher_cap=beside.oracle.budget.cap if beside is not None else None,
            teacher_budget=beside.teacher_budgets.get(tenant) if beside is not None else None,
            teacher_refused=beside.teacher_refused.get(tenant) if beside is not None else None,
            vectors=beside.parts.vectors if beside is not None else None,
        )
        if beside is not None:
            beside.teacher_budgets.setdefault(tenant, parts.oracle.budget)
            beside.teacher_refused.setdefault(tenant, parts.learner.refused)
        service = cls(parts, beside.reachability if beside is not None else None)
        service._owns_models = beside is None
        kept_at = snapshot_path(settings, tenant)
        service._snapshots = SnapshotKeeper(kept_at) if kept_at is not None else None
        try:
            try:
                if wait_for_store:
                    await service._reachable()
                await service.connect()
            except StoreUnavailable as exc:
                if not wait_for_store:
                    raise
                service.index.not_ready_reason = f"store unreachable: {exc}"
                service.reachability.lost(str(exc))  # logged once, if the ping did not
                if not await service._serve_snapshot():
                    service.learner.open()
            if upkeep:
                service._maintenance = asyncio.create_task(
                    service._maintain(), name="toolselect-maintenance"
                )
                service._watching = asyncio.create_task(
                    service._watch_store(), name="toolselect-store-watch"
                )
        except BaseException:
            await service.close()
            raise
        return service

    @property
    def loaded(self) -> bool:
        """Whether the catalog has been loaded from the store (ranking answers `not_ready`
        until then)."""
        return self.index.loaded

    @property
    def store_uri(self) -> str:
        return self.store.uri

    async def check_ready(self) -> None:
        """`NotReady` until loaded, and while the store does not answer (unless ranking from
        the catalog snapshot, which is ready: the store has not answered since start). Within
        `READY_PING_S`; at once while the store is known down (`Reachability.known_down`)."""
        self.index.check_ready()
        if self.index.from_snapshot:  # ready: ranks from the snapshot until the store answers
            return
        known = self.reachability.known_down()
        if known is not None:
            raise NotReady(f"store unreachable: {known}")
        try:
            await self._reachable()
        except ToolselectError as exc:
            raise NotReady(f"store unreachable: {exc}") from None

    async def _reachable(self) -> None:
        """`StoreUnavailable` unless the store answers a ping within `READY_PING_S`. A store
        that hangs (a stopped process, a partition dropping packets) or refuses for seconds
        would hold whoever waits: a readiness probe, or the request (an observe, say) that
        starts a tenant's service, which then starts not ready and connects in its upkeep."""
        await self.reachability.check()

    async def connect(self) -> None:
        """Migrate the store, load the demo catalog if asked and the store is empty, then load.
        Writes an outage spooled (this process's, or one's that died in it) are replayed by the
        upkeep once loaded, in order, new writes queueing behind them, and their labels reach
        the ranker by its poll: replayed first, a spool of 3,490 records kept a restarted server
        503 for 84 s, its learner not started and its queue refusing turns."""
        await self.store.migrate()
        await self.reload_keys()
        await self.parts.teacher_calls.seed()
        if self.settings.load_demo and not await self.store.list_tools():
            result = await self.store.upsert_tools(load_demo_catalog())
            log.info("demo_catalog_loaded", tools=result.upserted)
        await self.index.reload()
        self.index.loaded = True
        self.learner.start()
        await self._keep_snapshot()

    async def _serve_snapshot(self) -> bool:
        """Rank from the catalog snapshot kept in the data folder, when the store did not
        answer at start and there is one of this embedder: ready, turns observed into the
        spool, writes that need the store refused (503 `store_unavailable`), until `connect`
        loads the store's state. Whether it serves one."""
        if self._snapshots is None:
            return False
        snap = await self._snapshots.load(self.index.embedder.id)
        if snap is None:
            return False
        self.sessions.restore(snap.relations, snap.session_fit)
        await self.index.restore(snap)
        self.learner.start()
        log.warning(
            "serving_from_snapshot",
            tools=len(snap.tools),
            exemplars=len(snap.learned),
            catalog_version=snap.catalog_version,
            tool_pairs=snap.relations.pairs,
            session_fit=snap.session_fit.result,
        )
        return True

    async def _keep_snapshot(self) -> None:
        """Write the catalog snapshot if the ranker or the conversation signals changed since
        the last (Neo4j only)."""
        if self._snapshots is not None and self.loaded:
            signals = (self.sessions.relations, self.sessions.fit)
            await self._snapshots.keep(self.ranker.version, signals, self.index.capture)

    async def _take_back_refused(self) -> int:
        """Take back the turns a predecessor's spent teacher budget refused that are still
        undecided in the store (`refused_turns`, less those a label stored since settles), for
        `ask_again`: kept in memory only, they were lost with its process and stayed
        `limit_reached` for good. Only turns observed before this service started (those it
        refuses itself it keeps), as many as the list holds, the newest; their requests
        embedded again, in batches, and the tools their search showed and the agent passed
        over read back from their search ids. Run by the upkeep once the spool is replayed, so
        no decision the spool holds is missed. How many were taken back."""
        refused = self.learner.refused
        if not self.oracle.active:  # no call could be made: left in the store for a later start
            return 0
        if not self._take_back.claim():  # another worker's service of the tenant takes them
            return 0
        stored = await self.store.refused_turns(self._started_at, refused.size)
        catalog = self.ranker.snapshot.names
        searches = self.parts.searches
        found = [  # oldest first, each with the tools its search showed and the agent passed
            (t, searches.shown(t.search_id, catalog) if t.search_status == "not_shown" else ())
            for t in reversed(stored)
            if t.id not in refused
        ]
        labelled = await labelled_meanwhile(self.store, found)
        found = [(turn, passed) for turn, passed in found if turn.id not in labelled]
        batch = self.learner.config.batch_size
        taken: list[RefusedTurn] = []
        for start in range(0, len(found), batch):
            chunk = found[start : start + batch]
            vectors = await self.embedder.embed([turn.request for turn, _ in chunk])
            taken.extend(RefusedTurn(t, v, p) for (t, p), v in zip(chunk, vectors, strict=True))
        kept = refused.restore(taken)
        if kept:
            self.metrics.teacher_refused_reloaded.inc(kept)
            log.info("teacher_refused_taken_back", turns=kept, kept=len(refused))
        return kept

    async def reload_keys(self) -> None:
        """Read the stored API keys into the registry (at connect and every poll), so a key
        created or revoked through any replica counts here within the poll interval. Revoked
        keys are read too: while any key exists, authentication stays on. A read that a local
        change overtook is dropped; the next poll takes the store's keys. Keys live in the
        `default` tenant's store: another tenant's service has none to read."""
        if self.store.tenant != DEFAULT_TENANT:
            return
        seen = self.keys.changes
        self.keys.replace(await self.store.list_keys(), read_after=seen)

    async def _maintain(self) -> None:
        """Background upkeep: connect until loaded, flush the write backlog, poll for replicas,
        take back the turns a predecessor's spent budget refused (once loaded and the spool
        replayed; a failure is logged, counted and tried again a poll interval later), ask the
        teacher about them once it has room, close the teacher turns a stopped process left
        (once loaded, then every 10 minutes), and run the retention pass (once loaded, then
        every 10 minutes, or every tick while old turns are left; never while writes wait in
        the spool: the store is down or has not taken them yet)."""
        interval = self.settings.poll_interval_s
        tick = min(1.0, interval)
        since_poll = 0.0
        since_abandoned = ABANDONED_CHECK_S
        since_retention = RETENTION_CHECK_S
        since_take_back: float | None = interval  # None once taken back
        failing: str | None = None  # a failure other than the store's absence, logged once
        while True:
            await asyncio.sleep(tick)
            since_poll += tick
            since_abandoned += tick
            since_retention += tick
            if since_take_back is not None:
                since_take_back += tick
            try:
                if not self.loaded:
                    if self.store.down:  # a snapshot's learner found it down: reads fail fast
                        await self._reachable()  # until a flush, which replays its spool first
                        await self.store.flush()
                    await self.connect()
                    self.reachability.answered()
                    log.info("store_connected", store=self.store.uri)
                if self.store.backlog or self.store.down:
                    await self._reachable()
                    await self.store.flush()
                    await self.index.settle()
                if since_poll >= interval:
                    since_poll = 0.0
                    await self.reload_keys()
                    await self.index.refresh()
                    await self._keep_snapshot()
                    await self.parts.teacher_calls.follow()
                spooled = self.store.backlog or self.store.down
                due = since_take_back is not None and since_take_back >= interval
                if self.loaded and due and not spooled:
                    since_take_back = None if await self._taken_back() else 0.0
                if self.loaded and not spooled and since_retention >= RETENTION_CHECK_S:
                    since_retention = 0.0
                    if await self.retention.run():  # old turns left: again at the next tick
                        since_retention = RETENTION_CHECK_S
                if self.loaded:
                    await self.learner.ask_again()
                if self.loaded and since_abandoned >= ABANDONED_CHECK_S:
                    since_abandoned = 0.0
                    await self.learner.close_abandoned()
                if self.loaded and self.sessions.due():
                    self.sessions.start_refresh()
                if failing is not None:
                    log.info("store_recovered", store=self.store.uri)
                failing = None
            except ToolselectError as exc:
                if not self.loaded:
                    self.index.not_ready_reason = f"store unreachable: {exc}"
                if await self.reachability.explains(exc):
                    continue  # an outage: `Reachability` logs it once, not once a tick
                if str(exc) != failing:
                    log.warning("store_maintenance_failed", error=str(exc))
                failing = str(exc)

    async def _taken_back(self) -> bool:
        """`_take_back_refused`, whether it was done: a failure (the store, the embedder) is
        logged and counted, never stops the upkeep."""
        try:
            await self._take_back_refused()
        except Exception as exc:
            self.metrics.teacher_refused_reload_failed.inc()
            log.warning("teacher_refused_take_back_failed", error=repr(exc))
            return False
        self.refused_taken_back.set()
        return True

    async def _watch_store(self) -> None:
        """`toolselect_store_up` every poll interval: whether the store answers a ping within
        `READY_PING_S`. Apart from the upkeep, which a read of a store that hangs (SIGSTOP, a
        partition) holds for as long as the driver waits: the gauge stayed 1 meanwhile."""
        while True:
            try:
                await self._reachable()
                self.metrics.store_up.set(1)
            except ToolselectError:
                self.metrics.store_up.set(0)
            await asyncio.sleep(self.settings.poll_interval_s)

    async def _keep_unprocessed(self, turns: list[Turn]) -> None:
        """Spool the turns the learner acknowledged and never processed (a catalog that never
        loaded, a drain that timed out): they reach the store unlabelled, by this close's
        replay or the next start's, where the queue lost them with the process."""
        if not turns:
            return
        try:
            await self.store.keep_turns(turns)
        except SpoolError as exc:
            self.metrics.dropped.labels("shutdown").inc(len(turns))
            log.error("unprocessed_turns_dropped", turns=len(turns), error=str(exc))
            return
        log.warning("unprocessed_turns_spooled", turns=len(turns))

    async def close(self) -> None:
        """Drain the learner within the shutdown timeout, then release every resource: the
        spool is replayed with what is left of that time (a store that does not answer by then
        gets it at the next start)."""
        deadline = asyncio.get_running_loop().time() + self.settings.shutdown_timeout_s
        for task in (self._watching, self._maintenance):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.reachability.close()
        timeout_s = self.settings.shutdown_timeout_s
        await self.catalog.close(timeout_s)
        await self.sessions.close()
        try:
            await self._keep_unprocessed(await self.learner.close(timeout_s))
            await self.tuner.close()
            await self._keep_snapshot()
        finally:
            if self._snapshots is not None:
                self._snapshots.close()
            self._take_back.close()
            if self.parts.teacher is not None:
                await self.parts.teacher.aclose()
            if self._owns_models:  # the embedder and the vector cache, which `beside` shares
                await self.parts.queries.close()  # the embedder too, when it is wrapped
                if self.parts.vectors is not None:
                    self.parts.vectors.close()
            await self.store.close(max(deadline - asyncio.get_running_loop().time(), 0.0))
