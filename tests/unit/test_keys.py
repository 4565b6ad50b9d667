"""The pure rules of API keys: the route table, roles, tenants, key records, the registry and
the token buckets (`toolselect.keys`)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from tests.unit.test_purity import forbidden_imports
from toolselect.api.app import _app
from toolselect.config import Settings
from toolselect.errors import InvalidInput
from toolselect.keys import (
    OPEN_ROUTES,
    ROLES,
    ROUTE_ROLES,
    ApiKey,
    Caller,
    KeyRegistry,
    Limited,
    RateLimits,
    allows,
    bearer_token,
    check_tenant,
    key_from_row,
    key_hash,
    key_row,
    new_key,
    required_role,
)

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def _registered() -> set[tuple[str, str]]:
    """(method, route) of every route the served app registers; HEAD counted as GET."""
    app = _app(Settings())
    return {
        ("GET" if route.method == "HEAD" else route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None
    }


def test_every_v1_route_has_a_rule_and_every_rule_a_route() -> None:
    """The route table names exactly the `/v1/*` routes the app serves: none without a rule."""
    served = {(method, path) for method, path in _registered() if path.startswith("/v1/")}
    assert served == set(ROUTE_ROLES)


def test_routes_outside_v1_are_open_or_metrics() -> None:
    """Every other route is health, `/openapi.json`, the dashboard's files or `/metrics`."""
    others = {path for _, path in _registered() if not path.startswith("/v1/")}
    assert others <= OPEN_ROUTES | {"/metrics"}
    for path in OPEN_ROUTES:
        assert required_role("GET", path, path, metrics_auth=True) is None


def test_keys_module_is_pure() -> None:
    """`toolselect.keys` reaches no adapter library (aiohttp, drivers, sqlite3, structlog)."""
    assert forbidden_imports("toolselect.keys") == {}


def test_required_role_per_route() -> None:
    """Agents rank and observe, editors keep the catalog, admins the keys; HEAD is GET; an
    unmatched `/v1/*` path needs any key; a `/v1/*` route without a rule needs admin."""
    assert required_role("POST", "/v1/rank", "/v1/rank", metrics_auth=False) == "agent"
    assert required_role("POST", "/v1/observe/batch", "/v1/observe/batch", metrics_auth=False) == (
        "agent"
    )
    assert required_role("PUT", "/v1/tools", "/v1/tools", metrics_auth=False) == "editor"
    assert required_role("HEAD", "/v1/tools/{name}", "/v1/tools/x", metrics_auth=False) == (
        "editor"
    )
    assert required_role("POST", "/v1/keys", "/v1/keys", metrics_auth=False) == "admin"
    assert required_role("GET", None, "/v1/nope", metrics_auth=False) == "agent"
    assert required_role("GET", "/v1/new", "/v1/new", metrics_auth=False) == "admin"
    assert required_role("GET", "/metrics", "/metrics", metrics_auth=False) is None
    assert required_role("GET", "/metrics", "/metrics", metrics_auth=True) == "editor"


def test_roles_include_the_weaker_ones() -> None:
    """admin > editor > agent, and an unknown role allows nothing."""
    assert ROLES == ("agent", "editor", "admin")
    assert allows("admin", "agent") and allows("editor", "editor") and allows("agent", "agent")
    assert not allows("agent", "editor") and not allows("editor", "admin")
    assert not allows("root", "agent")


@pytest.mark.parametrize("tenant", ["default", "a", "team-7", "x_y", "0" + "a" * 62])
def test_tenant_ids_accepted(tenant: str) -> None:
    """Lower-case letters, digits, `_` and `-`, 1..63 characters, not starting with `_`/`-`."""
    assert check_tenant(tenant) == tenant


@pytest.mark.parametrize("tenant", ["", "Team", "-a", "_a", "a b", "a\n", "é", "a" * 64, 7])
def test_tenant_ids_refused(tenant: object) -> None:
    """Anything else is refused with the rule and the value."""
    with pytest.raises(InvalidInput, match=re.escape("^[a-z0-9][a-z0-9_-]{0,62}$")) as caught:
        check_tenant(tenant)
    assert caught.value.field == "tenant"


def test_new_key_is_stored_as_a_hash_and_a_prefix() -> None:
    """`tsk_` + 43 URL-safe characters; the record holds its SHA-256, its first 12 characters
    and a 12-hex id, never the key."""
    secret, key = new_key("team-a", "editor", NOW, name="ci")
    assert re.fullmatch(r"tsk_[A-Za-z0-9_-]{43}", secret)
    assert key.hash == hashlib.sha256(secret.encode()).hexdigest() == key_hash(secret)
    assert key.prefix == secret[:12]
    assert re.fullmatch(r"[0-9a-f]{12}", key.id)
    assert (key.tenant, key.role, key.name, key.created_at) == ("team-a", "editor", "ci", NOW)
    assert key.active and secret not in repr(key)
    assert new_key("team-a", "editor", NOW)[0] != secret


def test_new_key_refuses_bad_fields() -> None:
    """A bad tenant, role or name names its field."""
    for args, field in ((("Bad", "agent"), "tenant"), (("ok", "root"), "role")):
        with pytest.raises(InvalidInput) as caught:
            new_key(*args, NOW)
        assert caught.value.field == field
    with pytest.raises(InvalidInput) as caught:
        new_key("ok", "agent", NOW, name="  ")
    assert caught.value.field == "name"


def test_key_rows_round_trip() -> None:
    """What the stores write of a key reads back as the same record."""
    _, key = new_key("t", "admin", NOW, name="n")
    key = replace(key, revoked_at=NOW)
    row = key_row(key, lambda t: t.isoformat())
    assert "key" not in row and row["hash"] == key.hash
    assert key_from_row(row, datetime.fromisoformat) == key


def test_bearer_token() -> None:
    """Only `Bearer <key>` (any case of the scheme) gives a key."""
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    for header in (None, "", "Basic abc", "Bearer", "Bearer  ", "abc"):
        assert bearer_token(header) is None


def _stored(tenant: str, role: str, revoked: bool = False) -> tuple[str, ApiKey]:
    secret, key = new_key(tenant, role, NOW)
    return secret, replace(key, revoked_at=NOW if revoked else None)


def test_registry_resolves_configured_and_stored_keys() -> None:
    """Configured keys are admins of `default` (`config:N`); stored keys their own tenant
    and role; revoked and unknown keys resolve to nothing."""
    registry = KeyRegistry(["k-one", "k-two"])
    assert registry.enabled and not registry.loaded
    assert registry.resolve("k-two") == Caller("default", "admin", "config:2")
    agent, agent_key = _stored("team-a", "agent")
    revoked, revoked_key = _stored("team-a", "admin", revoked=True)
    assert registry.replace([agent_key, revoked_key])
    assert registry.loaded and len(registry) == 3
    assert registry.resolve(agent) == Caller("team-a", "agent", agent_key.id)
    assert registry.resolve(revoked) is None and registry.resolve("nope") is None


def test_registry_without_keys_is_off_and_local_changes_win() -> None:
    """No key at all: authentication off. A key added or dropped here counts at once, and a
    store read that began before the change does not undo it."""
    registry = KeyRegistry()
    assert not registry.enabled and registry.replace([]) and not registry.enabled
    secret, key = _stored("t", "editor")
    before = registry.changes
    registry.add(key)
    assert registry.enabled and registry.resolve(secret) is not None
    assert not registry.replace([], read_after=before)  # stale: read before the add
    assert registry.resolve(secret) is not None
    registry.drop(key.id)
    assert registry.resolve(secret) is None
    assert registry.replace([key], read_after=registry.changes)
    assert registry.resolve(secret) is not None


def test_revoking_the_last_key_keeps_authentication_on() -> None:
    """A store holding only revoked keys still turns authentication on: revoking the last
    key refuses it rather than opening the API."""
    registry = KeyRegistry()
    secret, key = _stored("t", "admin", revoked=True)
    registry.replace([key])
    assert registry.enabled and len(registry) == 0 and registry.resolve(secret) is None
    fresh, active = _stored("t", "admin")
    registry.add(active)
    registry.drop(active.id)
    assert registry.enabled and registry.resolve(fresh) is None


def test_tenant_bucket_paces_one_tenant_only() -> None:
    """A tenant gets its burst at once, then its rate; another tenant is unaffected; the
    retry time is whole seconds, at least 1."""
    limits = RateLimits(tenant_rps=0.5, tenant_burst=2)
    assert limits.admit("a", 0.0) is None and limits.admit("a", 0.0) is None
    assert limits.admit("a", 0.1) == Limited("tenant", 2)
    assert limits.admit("b", 0.1) is None
    assert limits.admit("a", 1.5) == Limited("tenant", 1)
    assert limits.admit("a", 2.0) is None
    assert limits.admit("a", 2.0) is not None


def test_global_bucket_and_no_limits() -> None:
    """The global rate counts every tenant; a refusal takes nothing; 0 means no limit."""
    limits = RateLimits(tenant_rps=1.0, tenant_burst=1, global_rps=2.0)
    assert limits.admit("a", 0.0) is None and limits.admit("b", 0.0) is None
    assert limits.admit("c", 0.0) == Limited("global", 1)
    assert limits.admit("c", 0.5) is None  # its own bucket was not spent by the refusal
    unlimited = RateLimits()
    assert not unlimited.enabled
    assert all(unlimited.admit("a", 0.0) is None for _ in range(1000))


def test_tenant_buckets_are_bounded() -> None:
    """Past the bound, full buckets (idle tenants) are forgotten; a new one starts full."""
    limits = RateLimits(tenant_rps=1.0, tenant_burst=1, max_tenants=3)
    for i in range(3):
        assert limits.admit(f"t{i}", 0.0) is None
    assert limits.admit("t3", 5.0) is None
    assert len(limits._tenants) == 1
