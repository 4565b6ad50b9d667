"""An outage of one store as this process logs it: two lines, whatever the tenants on it.

Every service of the process on one store (the same URI: on Neo4j, `default` and every tenant
started beside it, on the default's driver) reports to one `StoreOutages`, which each
service's `Reachability` makes or joins. The outage starts when the first of them finds the
store does not answer (`store_unreachable`, with the error and how many tenants are served
from the store) and ends when every one that found it down has had it answer again, or closed
(`store_reachable`, with how long it was down, until the first answer after the last failure;
how many tenants found it down; the requests this process refused meanwhile; the writes all
of them spooled). A line per tenant said the same thing a hundred times, and an alert on
`store_unreachable` fired as often. A tenant on a store of its own (SQLite: a file per tenant,
which its own disk, lock or permissions may lose alone) has its own lines, naming it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from toolselect.keys import DEFAULT_TENANT
from toolselect.metrics import Metrics
from toolselect.store.buffered import BufferedStore

# The refusals an outage line counts: `503 not_ready` and `store_unavailable` (probes are not).
_REFUSED = ("not_ready", "store_unavailable")

log = structlog.get_logger("toolselect.service")


class StoreOutages:
    """The outages of the store at `uri`, for every service of this process on it: the
    services on it (each by its store), those that found it down, and the current outage's
    tally (see the module docstring)."""

    def __init__(
        self, uri: str, metrics: Metrics, *, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.uri = uri
        self._metrics = metrics
        self._now = now
        self._serving: set[BufferedStore] = set()  # the services on the store, by their store
        self._down: set[BufferedStore] = set()  # those that found it down and had no answer since
        self.open = False  # `store_unreachable` logged, `store_reachable` not yet
        self._lost_at = 0.0
        self._back_at: float | None = None  # the first answer since the last failure
        self._refused_at = 0.0
        self._spooled_from: dict[BufferedStore, int] = {}  # each one's spool count at its start
        self._spooled_gone = 0  # spooled by services closed during the outage
        self._touched: set[str] = set()  # the tenants that found it down

    def join(self, store: BufferedStore) -> None:
        """A service on the store started (during an outage too: it counts from now)."""
        self._serving.add(store)
        if self.open:
            self._spooled_from[store] = store.spool.appended

    def leave(self, store: BufferedStore) -> None:
        """A service on the store closed: the outage no longer waits for its answer (left the
        last that found it down, the next answer of another ends it), and what it spooled
        meanwhile stays counted."""
        if store not in self._serving:
            return
        self._serving.discard(store)
        self._down.discard(store)
        if self.open:
            self._spooled_gone += store.spool.appended - self._spooled_from.pop(store, 0)

    def lost(self, store: BufferedStore, error: str) -> None:
        """`store`'s service found the store down: the outage's first line if none is open."""
        self._down.add(store)
        self._touched.add(store.tenant)
        self._back_at = None
        if self.open:
            return
        self.open = True
        self._lost_at = self._now()
        self._refused_at = self._refused()
        self._spooled_from = {s: s.spool.appended for s in self._serving}
        self._spooled_gone = 0
        self._touched = {store.tenant}
        tenants = len({s.tenant for s in self._serving})
        log.warning(
            "store_unreachable", store=self.uri, error=error, tenants=tenants, **self._own()
        )

    def answered(self, store: BufferedStore) -> None:
        """`store`'s service had the store answer: the outage's second line once none that
        found it down waits for an answer."""
        self._down.discard(store)
        if not self.open:
            return
        if self._back_at is None:
            self._back_at = self._now()
        if self._down:
            return
        self.open = False
        spooled = self._spooled_gone + sum(
            s.spool.appended - self._spooled_from.get(s, s.spool.appended) for s in self._serving
        )
        log.warning(
            "store_reachable",
            store=self.uri,
            down_s=round(self._back_at - self._lost_at, 1),
            tenants=len(self._touched),
            refused=int(self._refused() - self._refused_at),
            spooled=spooled,
            **self._own(),
        )

    def _refused(self) -> float:
        """Requests this process answered `503 not_ready` or `store_unavailable` so far."""
        values = (
            self._metrics.value("toolselect_http_rejected_total", {"reason": r}) for r in _REFUSED
        )
        return sum(v or 0.0 for v in values)

    def _own(self) -> dict[str, str]:
        """`tenant`, when the store is one tenant's other than `default` (its SQLite file)."""
        tenants = {s.tenant for s in self._serving} | self._touched
        if len(tenants) == 1 and DEFAULT_TENANT not in tenants:
            return {"tenant": next(iter(tenants))}
        return {}
