"""`UnknownTenants`: what `TenantServices.known` remembers of the tenants the store said do not
exist, bounded in age and count, and never what a lookup read before a tenant was made."""

from __future__ import annotations

from toolselect.service.unknown_tenants import UnknownTenants


def test_a_tenant_is_unknown_for_the_ttl_then_asked_again() -> None:
    """An unknown tenant stays so for `ttl_s` seconds after its lookup, then is forgotten."""
    now = [0.0]
    unknown = UnknownTenants(5.0, lambda: now[0])
    unknown.add("ghost", stamp=unknown.stamp)
    now[0] = 4.9
    assert unknown.fresh("ghost")
    now[0] = 5.0
    assert not unknown.fresh("ghost")
    assert len(unknown) == 0


def test_the_oldest_lookup_goes_beyond_the_size() -> None:
    """Beyond `size` tenants the least recently looked up is forgotten: a flood of names costs
    lookups, not memory."""
    unknown = UnknownTenants(60.0, lambda: 0.0, size=2)
    for tenant in ("a", "b", "a", "c"):
        unknown.add(tenant, stamp=unknown.stamp)
    assert [t for t in "abc" if unknown.fresh(t)] == ["a", "c"]


def test_a_made_tenant_is_known_and_an_older_lookup_is_not_kept() -> None:
    """`made` forgets the tenant at once, and a lookup begun before any tenant was made is not
    kept: it may have read the store before that tenant's first write."""
    unknown = UnknownTenants(60.0, lambda: 0.0)
    unknown.add("ghost", stamp=unknown.stamp)
    began = unknown.stamp
    unknown.made("ghost")
    assert not unknown.fresh("ghost")
    unknown.add("ghost", stamp=began)
    assert not unknown.fresh("ghost")
    unknown.add("ghost", stamp=unknown.stamp)
    assert unknown.fresh("ghost")
