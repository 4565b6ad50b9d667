"""Whether the store answers, as one service last asked it, and what the log says of it.

Every asker (`/readyz`, the upkeep, the `toolselect_store_up` watch, a starting tenant) shares
one ping at a time, bounded by `READY_PING_S`. While the store is known down, a readiness
probe is answered from that at once, a ping started behind it when none is under way, so a
probe never waits on a store that hangs but for the first after it stopped answering. Each
answer and failure is told to the store's `StoreOutages`, shared by every service of the
process on the same store, which logs an outage twice, whatever its length, traffic and
tenants: `store_unreachable` and `store_reachable`; the driver's retries and each refusal are
counted on `/metrics`, their lines thinned out by `logs.Repeats`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from toolselect.errors import StoreUnavailable, ToolselectError
from toolselect.metrics import Metrics
from toolselect.service.outages import StoreOutages
from toolselect.store.buffered import BufferedStore

# How long an asker waits for the store's answer (probes usually give up after 1-5 s).
READY_PING_S = 2.0


class Reachability:
    """The store's reachability for one service: one ping at a time, the last answer kept,
    each told to the store's outages (see the module docstring). `beside` is the process's
    `default` service's: on the same store, its `StoreOutages` is shared."""

    def __init__(
        self,
        store: BufferedStore,
        metrics: Metrics,
        beside: Reachability | None = None,
        *,
        within_s: float = READY_PING_S,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self.within_s = within_s
        self._pinging: asyncio.Task[None] | None = None
        self.error: str | None = None  # the last failure while down; None while it answers
        shared = beside.outages if beside is not None else None
        if shared is None or shared.uri != store.uri:  # a store of its own (a SQLite file)
            shared = StoreOutages(store.uri, metrics, now=now)
        self.outages: StoreOutages = shared
        self.outages.join(store)

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
        """The store did not answer: told to its outages (logged if none is open)."""
        self.error = error
        self.outages.lost(self._store, error)

    def answered(self) -> None:
        """The store answered: told to its outages (which end once no service waits on it)."""
        self.error = None
        self.outages.answered(self._store)

    async def close(self) -> None:
        if self._pinging is not None:
            self._pinging.cancel()
            await asyncio.gather(self._pinging, return_exceptions=True)
        self.outages.leave(self._store)
