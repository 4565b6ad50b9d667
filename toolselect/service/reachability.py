"""Whether the store answers, as one service last asked it, and what the log says of it.

Every asker (`/readyz`, the upkeep, the `toolselect_store_up` watch, a starting tenant) shares
one ping at a time, bounded by `READY_PING_S`. While the store is known down, a readiness
probe is answered from that at once, a ping started behind it when none is under way, so a
probe never waits on a store that hangs but for the first after it stopped answering. An
outage is logged twice, whatever its length and traffic: `store_unreachable` when the store
stops answering, `store_reachable` when it answers again, with how long it was down, the
requests this process refused meanwhile (`503 not_ready` / `store_unavailable`) and the
writes it spooled; the driver's retries and each refusal are counted on `/metrics`, their
lines thinned out by `logs.Repeats`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from toolselect.errors import StoreUnavailable, ToolselectError
from toolselect.keys import DEFAULT_TENANT
from toolselect.metrics import Metrics
from toolselect.store.buffered import BufferedStore

# How long an asker waits for the store's answer (probes usually give up after 1-5 s).
READY_PING_S = 2.0
_REFUSED = ("not_ready", "store_unavailable")

log = structlog.get_logger("toolselect.service")


class Reachability:
    """The store's reachability for one service: one ping at a time, the last answer kept,
    one line when it changes (see the module docstring)."""

    def __init__(
        self,
        store: BufferedStore,
        metrics: Metrics,
        *,
        within_s: float = READY_PING_S,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self.within_s = within_s
        self._now = now
        self._pinging: asyncio.Task[None] | None = None
        self.error: str | None = None  # the last failure while down; None while it answers
        self._lost_at = 0.0
        self._refused_at = 0.0
        self._spooled_at = 0

    @property
    def down(self) -> bool:
        return self.error is not None

    async def check(self) -> None:
        """Ask the store, joining the ping under way if there is one; `StoreUnavailable` (or
        the store's `StoreError`) unless it answers within `within_s`."""
        await asyncio.shield(self._ping())

    def known_down(self) -> str | None:
        """The last failure while the store is known down, a ping started behind it when none
        is under way (which marks it back when it answers); None when it is not known down."""
        if self.error is not None:
            self._ping()
        return self.error

    def _ping(self) -> asyncio.Task[None]:
        if self._pinging is None or self._pinging.done():
            self._pinging = asyncio.create_task(self._ask(), name="toolselect-store-ping")
            # Retrieved here: a probe answered from the known state may leave it unawaited.
            self._pinging.add_done_callback(lambda t: t.cancelled() or t.exception())
        return self._pinging

    async def _ask(self) -> None:
        try:
            async with asyncio.timeout(self.within_s):
                await self._store.ping()
        except TimeoutError:
            error = StoreUnavailable(f"{self._store.uri}: no answer within {self.within_s:g} s")
            self.lost(str(error))
            raise error from None
        except ToolselectError as exc:
            self.lost(str(exc))
            raise
        self.answered()

    async def explains(self, exc: ToolselectError) -> bool:
        """Whether the store's absence explains a failure (the upkeep's): `StoreUnavailable`
        while a ping finds it down, which logs the outage once. Not when the ping answers (a
        read or write that times out on a store that answers pings): marking the store down
        then would log it lost and back every tick."""
        if not isinstance(exc, StoreUnavailable):
            return False
        if self.down:
            return True
        try:
            await self.check()
        except ToolselectError:
            return True
        return False

    def lost(self, error: str) -> None:
        """The store did not answer: logged if it was not known down already."""
        was_down = self.down
        self.error = error
        if was_down:
            return
        self._lost_at = self._now()
        self._refused_at = self._refused()
        self._spooled_at = self._store.spool.appended
        log.warning("store_unreachable", store=self._store.uri, error=error, **self._tenant())

    def answered(self) -> None:
        """The store answered: logged, with what the outage cost, if it was known down."""
        if not self.down:
            return
        self.error = None
        log.warning(
            "store_reachable",
            store=self._store.uri,
            down_s=round(self._now() - self._lost_at, 1),
            refused=int(self._refused() - self._refused_at),
            spooled=self._store.spool.appended - self._spooled_at,
            **self._tenant(),
        )

    def _refused(self) -> float:
        """Requests this process answered `503 not_ready` or `store_unavailable` so far."""
        values = (
            self._metrics.value("toolselect_http_rejected_total", {"reason": r}) for r in _REFUSED
        )
        return sum(v or 0.0 for v in values)

    def _tenant(self) -> dict[str, str]:
        tenant = self._store.tenant
        return {} if tenant == DEFAULT_TENANT else {"tenant": tenant}

    async def close(self) -> None:
        if self._pinging is not None:
            self._pinging.cancel()
            await asyncio.gather(self._pinging, return_exceptions=True)
