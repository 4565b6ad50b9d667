"""The tenants the store said do not exist, remembered for a while (`TenantServices.known`).

A request naming a tenant that is neither `default` nor live costs a store lookup (`Store.exists`
and the tenant's keys: on Neo4j a session and two reads); a caller repeating a mistyped or made-up
tenant would pay it on every request. Each answer "no such tenant" is kept `ttl_s` seconds (the
poll interval: another replica's new tenant is seen here within it, as its new keys are), for
at most `UNKNOWN_TENANTS_KEPT` tenants (the oldest forgotten first: a flood of distinct names
costs a lookup each, never memory). A tenant this process makes (its first write, a key made
for it) is forgotten at once (`made`), and a lookup that began before such a change is not
kept (`stamp`): it may have read the store before the tenant's first write.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

# About 100 bytes each: a megabyte at most.
UNKNOWN_TENANTS_KEPT = 10_000


class UnknownTenants:
    """Tenant ids found unknown, each until `ttl_s` seconds after its lookup (by `now`), at
    most `size` of them."""

    def __init__(
        self, ttl_s: float, now: Callable[[], float], *, size: int = UNKNOWN_TENANTS_KEPT
    ) -> None:
        self._ttl_s = ttl_s
        self._now = now
        self._size = size
        self._until: OrderedDict[str, float] = OrderedDict()  # oldest lookup first
        self.stamp = 0  # tenants made so far: a lookup begun before the last one is not kept

    def __len__(self) -> int:
        return len(self._until)

    def fresh(self, tenant: str) -> bool:
        """Whether `tenant` was found unknown less than `ttl_s` seconds ago."""
        until = self._until.get(tenant)
        if until is None:
            return False
        if self._now() < until:
            return True
        del self._until[tenant]
        return False

    def add(self, tenant: str, *, stamp: int) -> None:
        """Keep `tenant` as unknown, from a lookup that began at `stamp`; ignored when a tenant
        was made since (the lookup may have read the store before it)."""
        if stamp != self.stamp or self._size <= 0:
            return
        self._until.pop(tenant, None)
        self._until[tenant] = self._now() + self._ttl_s
        while len(self._until) > self._size:
            self._until.popitem(last=False)

    def made(self, tenant: str) -> None:
        """`tenant` exists now (this process started it or made a key for it)."""
        self.stamp += 1
        self._until.pop(tenant, None)
