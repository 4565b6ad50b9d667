"""One service per tenant: the `default` tenant's, and the others' started on first use.

`TenantServices` holds the `default` tenant's `Service` (started as the server always started
it: it also holds the API keys, the metrics and the settings) and starts another tenant's on
its first request (`Service.start(tenant=..., beside=default)`), over that tenant's store and
spool file (`keys.tenant_file`), sharing the default service's embedder (the model is loaded
once) and vector cache, the `Metrics` registry (each its own `tenant` label), the global
teacher budget, the Neo4j driver (one connection pool, the schema migrated once, an outage
logged once for all: `service/outages.py`) and the settings. One start per tenant at a time
(a lock per tenant); at most `TOOLSELECT_TENANTS_LIVE` other tenants live at once (the least
recently used is closed beyond it), and a tenant unused for `TOOLSELECT_TENANT_IDLE` seconds is
closed by a background sweep.
A closed tenant's data stays in its store; its next request starts it again. Neither the sweep
nor the bound closes a tenant while a request on it runs (`busy`, held by the HTTP middleware
and MCP's key gate around each request): the bound is then exceeded until one ends.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import structlog

from toolselect.clock import Clock, utc_now
from toolselect.config import Settings
from toolselect.errors import UnknownTenant
from toolselect.keys import DEFAULT_TENANT, check_tenant, tenant_file
from toolselect.metrics import Metrics
from toolselect.service.root import Service
from toolselect.service.unknown_tenants import UnknownTenants
from toolselect.store.factory import open_store

log = structlog.get_logger("toolselect.service")


class TenantServices:
    """The service of every tenant: `default`'s given, the others started lazily and closed
    when idle or least recently used beyond the bound (see the module docstring)."""

    def __init__(
        self,
        default: Service,
        *,
        clock: Clock = utc_now,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.default = default
        self.settings = default.settings
        self._clock = clock
        self._now = now
        self._live: OrderedDict[str, Service] = OrderedDict()  # least recently used first
        self._used: dict[str, float] = {}
        self._busy: Counter[str] = Counter()  # requests in flight per tenant
        # One start or close per tenant at a time: its lock, and how many hold or await it
        # (the lock goes with its last user, never from under one waiting for it).
        self._locks: dict[str, asyncio.Lock] = {}
        self._lock_users: Counter[str] = Counter()
        # Closed tenants whose teacher budget and refused turns `default` keeps for their next
        # start, least recently closed first (`_keep`).
        self._kept: OrderedDict[str, None] = OrderedDict()
        # Closed tenants whose counters stay on /metrics, least recently closed first
        # (`_forget_series`).
        self._counted: OrderedDict[str, None] = OrderedDict()
        # Tenants found unknown, not looked up again within a poll interval, and the lookups
        # under way, which the requests for the same tenant meanwhile wait for (`known`).
        self._unknown = UnknownTenants(self.settings.poll_interval_s, now)
        self._asking: dict[str, asyncio.Future[bool]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._closes: set[asyncio.Future[None]] = set()  # closes under way (`close_tenant`)
        self._closed = False

    @classmethod
    async def start(
        cls,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        wait_for_store: bool = False,
        clock: Clock = utc_now,
    ) -> TenantServices:
        """The `default` tenant's service started as `Service.start` does; the others later."""
        default = await Service.start(
            settings, metrics=metrics, wait_for_store=wait_for_store, clock=clock
        )
        return cls(default, clock=clock)

    @property
    def live(self) -> list[str]:
        """The tenants other than `default` whose service runs, least recently used first."""
        return list(self._live)

    @contextmanager
    def busy(self, tenant: str) -> Iterator[None]:
        """Hold `tenant` open for a request's time: the sweep and the bound pass it by."""
        self._busy[tenant] += 1
        try:
            yield
        finally:
            self._busy[tenant] -= 1
            if self._busy[tenant] <= 0:
                del self._busy[tenant]
            if tenant in self._used:  # idle from the end of its last request
                self._used[tenant] = self._now()

    async def known(self, tenant: str) -> bool:
        """Whether `tenant` exists, so that a request that makes none of its data may start it:
        `default`, a running tenant, one with a spool file in the data folder (what an outage
        left), one its store says exists (`Store.exists`: its SQLite file, or on Neo4j any node
        of it in the shared database, asked through its store on the default's driver, which
        creates nothing), or one with a key (revoked ones too; keys are `default`'s data). A
        tenant comes to exist with a key made for it or with its first write (`get`, which
        starts any). An unknown tenant is remembered so for a poll interval (`UnknownTenants`),
        unless this process makes it meanwhile (`get`, `made`); requests for a tenant under
        lookup wait for that lookup's answer."""
        if tenant == DEFAULT_TENANT or tenant in self._live:
            return True
        check_tenant(tenant)
        lookups = self.default.metrics.tenant_lookups
        if self._unknown.fresh(tenant):
            lookups.labels("cached").inc()
            return False
        asking = self._asking.get(tenant)
        if asking is None:
            lookups.labels("store").inc()
            asking = self._asking[tenant] = asyncio.ensure_future(self._look_up(tenant))
            asking.add_done_callback(lambda done: self._asked(tenant, done))
        else:
            lookups.labels("joined").inc()
        # Shielded: a request cancelled (its client gone) leaves the others their answer.
        return await asyncio.shield(asking)

    async def _look_up(self, tenant: str) -> bool:
        stamp = self._unknown.stamp
        if await self._stored(tenant):
            return True
        self._unknown.add(tenant, stamp=stamp)
        return False

    def _asked(self, tenant: str, done: asyncio.Future[bool]) -> None:
        self._asking.pop(tenant, None)
        if not done.cancelled():
            done.exception()  # retrieved, or asyncio logs it when every waiter was cancelled

    async def _stored(self, tenant: str) -> bool:
        if tenant_file(self.settings.spool_path, tenant).exists():
            return True
        store = await open_store(self.settings, tenant=tenant, beside=self.default.store.inner)
        try:
            if await store.exists():
                return True
        finally:
            await store.close()
        return bool(await self.default.store.list_keys(tenant))

    def made(self, tenant: str) -> None:
        """`tenant` exists from now on (started here, or a key was made for it here): served
        at once, not found unknown from what `known` remembered."""
        self._unknown.made(tenant)

    async def existing(self, tenant: str) -> Service:
        """`get` for a request that makes no data of `tenant` (a read, a ranking, a label, which
        needs a catalog tool): `UnknownTenant` when it does not exist yet (`known`), which `get`
        would start, making its store."""
        if not await self.known(tenant):
            raise UnknownTenant(
                f"no tenant {tenant!r}: a tenant starts with a key made for it, or with its "
                "first catalog upload or reported turn"
            )
        return await self.get(tenant)

    async def get(self, tenant: str) -> Service:
        """`tenant`'s service, started when it is not running."""
        if tenant == DEFAULT_TENANT:
            return self.default
        service = self._live.get(tenant)
        if service is None:
            check_tenant(tenant)
            async with self._locked(tenant):
                service = self._live.get(tenant)
                if service is None:
                    service = await self._start(tenant)
        self._live.move_to_end(tenant)
        self._used[tenant] = self._now()
        await self._bound()
        return service

    async def _start(self, tenant: str) -> Service:
        if self._closed:
            raise RuntimeError("tenant services are closed")
        # Each tenant its own search log (ids never cross tenants), of its own smaller bound.
        settings = self.settings.override(searches_kept=self.settings.tenant_searches_kept)
        # Its counters count on, and no other tenant's close may remove the series its start
        # sets meanwhile (`_forget_series`); a failed start leaves them as a close does.
        self._counted.pop(tenant, None)
        try:
            service = await Service.start(
                settings, wait_for_store=True, clock=self._clock, tenant=tenant, beside=self.default
            )
        except BaseException:
            self._forget_series(tenant)
            raise
        self._live[tenant] = service
        self._used[tenant] = self._now()
        self.made(tenant)
        self._kept.pop(tenant, None)  # its kept budget and refused turns are in use again
        log.info("tenant_started", tenant=tenant, live=len(self._live))
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="toolselect-tenants")
        return service

    async def _bound(self) -> None:
        """Close the least recently used tenants beyond `TOOLSELECT_TENANTS_LIVE` (none with a
        request in flight)."""
        while len(self._live) > self.settings.tenants_live:
            idle = next((t for t in self._live if t not in self._busy), None)
            if idle is None:
                return
            await self.close_tenant(idle, why="evicted", idle=True)

    async def close_tenant(self, tenant: str, *, why: str = "closed", idle: bool = False) -> None:
        """Close `tenant`'s service if it runs (its data stays in the store); with `idle`, only
        when no request on it is in flight. The close runs to its end, under the tenant's lock,
        even when its caller is cancelled (a request's timeout while it evicts, the sweeper at
        shutdown): cut short, it left a service half closed that a shutdown waited on for ever."""
        closing = asyncio.ensure_future(self._close(tenant, why, idle))
        self._closes.add(closing)
        closing.add_done_callback(self._closes.discard)
        await asyncio.shield(closing)

    async def _close(self, tenant: str, why: str, idle: bool) -> None:
        async with self._locked(tenant):
            if idle and tenant in self._busy:
                return
            service = self._live.pop(tenant, None)
            self._used.pop(tenant, None)
            if service is None:
                return
            try:
                await service.close()
            finally:
                self._forget_series(tenant)
                self._keep(tenant)
                log.info("tenant_closed", tenant=tenant, why=why, live=len(self._live))

    @asynccontextmanager
    async def _locked(self, tenant: str) -> AsyncIterator[None]:
        """Hold `tenant`'s start lock. Dropped once no one holds or awaits it: dropped as soon
        as a close let go of it, a request waiting on it started the tenant under a lock that a
        request arriving meanwhile no longer found, and two services of one tenant ran."""
        lock = self._locks.setdefault(tenant, asyncio.Lock())
        self._lock_users[tenant] += 1
        try:
            async with lock:
                yield
        finally:
            self._lock_users[tenant] -= 1
            if not self._lock_users[tenant]:
                del self._lock_users[tenant]
                self._locks.pop(tenant, None)

    def _forget_series(self, tenant: str) -> None:
        """Remove closed `tenant`'s gauges from `/metrics` (they would show stale values), and
        the counters and histograms of the tenants closed before the last
        `TOOLSELECT_TENANTS_LIVE`: a process serving tenants in turn would otherwise keep every
        one's series it ever served. The rest stay, so that a tenant closed and started again
        in a while counts on rather than reset."""
        self.default.metrics.for_tenant(tenant).forget_tenant()
        self._count(tenant)

    def counted(self, tenant: str) -> None:
        """A series of `tenant` was counted while it may not run (`toolselect_rate_limited_total`
        of a refused request): it stays as a closed tenant's counters do, among the last
        `TOOLSELECT_TENANTS_LIVE`, so that refusals for tenants never started keep no series
        each."""
        if tenant == DEFAULT_TENANT or tenant in self._live or tenant in self._lock_users:
            return  # running, or starting or closing: its start or close sees to its series
        self._count(tenant)

    def _count(self, tenant: str) -> None:
        self._counted[tenant] = None
        self._counted.move_to_end(tenant)
        while len(self._counted) > self.settings.tenants_live:
            old, _ = self._counted.popitem(last=False)
            self.default.metrics.for_tenant(old).forget_tenant(counters=True)

    def _keep(self, tenant: str) -> None:
        """Keep closed `tenant`'s teacher budget and refused turns for its next start, for the
        `TOOLSELECT_TENANTS_LIVE` most recently closed tenants: each holds up to
        `TOOLSELECT_QUEUE_SIZE` refused turns with their vectors, and a process serving tenants
        in turn would keep every one's. Beyond, a tenant's refused turns go (they stay
        `limit_reached`, as after a restart), and its budget once no call of its is in the hour
        (a new one, seeded from the store, would count those calls in the global cap again)."""
        self._kept[tenant] = None
        self._kept.move_to_end(tenant)
        budgets, refused = self.default.teacher_budgets, self.default.teacher_refused
        for old in list(self._kept)[: max(0, len(self._kept) - self.settings.tenants_live)]:
            refused.pop(old, None)
            budget = budgets.get(old)
            if budget is None or budget.idle():
                budgets.pop(old, None)
                del self._kept[old]

    async def sweep(self) -> list[str]:
        """Close every tenant unused for `TOOLSELECT_TENANT_IDLE` seconds; the ones closed."""
        cutoff = self._now() - self.settings.tenant_idle_s
        idle = [t for t, used in self._used.items() if used <= cutoff and t not in self._busy]
        for tenant in idle:
            await self.close_tenant(tenant, why="idle", idle=True)
        return idle

    async def _sweep_forever(self) -> None:
        tick = min(30.0, max(0.05, self.settings.tenant_idle_s / 4))
        while True:
            await asyncio.sleep(tick)
            try:
                await self.sweep()
            except Exception:
                log.exception("tenant_sweep_failed")

    async def close_others(self) -> None:
        """Close every tenant's service but `default`'s (which its owner closes)."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        for tenant in list(self._live):
            try:
                await self.close_tenant(tenant, why="shutdown")
            except Exception:
                log.exception("tenant_close_failed", tenant=tenant)
        await asyncio.gather(*self._closes, return_exceptions=True)  # callers cancelled meanwhile

    async def close(self) -> None:
        """Close every tenant's service, `default`'s last."""
        try:
            await self.close_others()
        finally:
            await self.default.close()
