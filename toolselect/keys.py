"""API keys: tenants and roles, the route table, the in-memory registry and the request limits.

A key belongs to one tenant (`TENANT_PATTERN`; `default` is the built-in one) and has one role,
each including the ones before it:

    agent    rank, select and observe
    editor   also the catalog (tools, packs, labels) and analytics: the dashboard's reads
    admin    also the keys, and may act on any tenant (header `X-Toolselect-Tenant`)

A key is `tsk_` + 43 URL-safe characters (`secrets.token_urlsafe(32)`); only its SHA-256 and its
first 12 characters (to recognise it in a listing) are stored (`records.ApiKey`). `ROUTE_ROLES`
names the least role of every `/v1/*` route, and `required_role` decides for any request; a
`/v1/*` route without a rule needs `admin` (`tests/unit/test_keys.py` holds every registered route
to the table). `KeyRegistry` is what the middleware asks: the stored keys (reloaded by the
service's upkeep) and `TOOLSELECT_API_KEYS`, which are `admin` keys of `default` and never stored.
`MCP_ROLES` does the same for the tools and resources of `toolselect mcp` over HTTP
(`mcp_role`; `tests/mcp/test_keys.py` holds every tool, resource and template the server
registers to it). `RateLimits` are the per-tenant and global token buckets, in this process's
memory.

Pure: no I/O and no clock (times are passed in), so the rules are tested on their own.
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, get_args

from toolselect.errors import InvalidInput
from toolselect.records import ApiKey, Role

__all__ = [
    "DEFAULT_TENANT",
    "MCP_ROLES",
    "OPEN_CALLER",
    "ROLES",
    "ROUTE_ROLES",
    "TENANT_HEADER",
    "TENANT_MAX",
    "TENANT_PATTERN",
    "ApiKey",
    "Caller",
    "KeyRegistry",
    "Limited",
    "RateLimits",
    "Role",
    "allows",
    "bearer_token",
    "check_name",
    "check_role",
    "check_tenant",
    "key_from_row",
    "key_hash",
    "key_row",
    "mcp_role",
    "mcp_rule",
    "new_key",
    "required_role",
    "shown",
    "tenant_file",
]

ROLES: tuple[Role, ...] = get_args(Role)
_RANK: Mapping[str, int] = {role: rank for rank, role in enumerate(ROLES)}
DEFAULT_TENANT = "default"
TENANT_MAX = 63  # characters of a tenant id
# The one statement of the tenant rule: what `check_tenant` enforces, the OpenAPI document and
# the key models state, and the client checks before sending `X-Toolselect-Tenant`.
TENANT_PATTERN = rf"^[a-z0-9][a-z0-9_-]{{0,{TENANT_MAX - 1}}}$"
_TENANT = re.compile(TENANT_PATTERN)
TENANT_HEADER = "X-Toolselect-Tenant"
KEY_PREFIX = "tsk_"
PREFIX_CHARS = 12  # shown in listings: `tsk_` and 8 characters of the secret
MAX_NAME = 200

# The least role of each `/v1/*` route: (method, route as aiohttp names it, `resource.canonical`).
# HEAD is GET's. A `/v1/*` route missing here needs `admin`.
ROUTE_ROLES: Mapping[tuple[str, str], Role] = {
    ("POST", "/v1/rank"): "agent",
    ("POST", "/v1/select"): "agent",
    ("POST", "/v1/observe"): "agent",
    ("POST", "/v1/observe/batch"): "agent",
    ("PUT", "/v1/tools"): "editor",
    ("GET", "/v1/tools"): "editor",
    ("GET", "/v1/tools/{name}"): "editor",
    ("DELETE", "/v1/tools/{name}"): "editor",
    ("GET", "/v1/tools/{name}/exemplars"): "editor",
    ("POST", "/v1/exemplars"): "editor",
    ("DELETE", "/v1/exemplars/{id}"): "editor",
    ("GET", "/v1/analytics"): "editor",
    ("GET", "/v1/analytics/learning"): "editor",
    ("GET", "/v1/analytics/{name}"): "editor",
    ("POST", "/v1/keys"): "admin",
    ("GET", "/v1/keys"): "admin",
    ("DELETE", "/v1/keys/{id}"): "admin",
    ("GET", "/v1/whoami"): "agent",
}
# Routes outside `/v1/*` that never need a key (the dashboard's files hold no data); `/metrics`
# needs an editor key when `TOOLSELECT_METRICS_AUTH` is set and keys are on, and shows a key's
# own tenant's series unless an admin asks for all of them (`routes.metrics`).
OPEN_ROUTES = frozenset({"/healthz", "/readyz", "/openapi.json", "/ui", "/ui/", "/ui/{name}"})
METRICS_ROUTE = "/metrics"

# The least role of each MCP tool and resource (`toolselect mcp --transport http`; stdio has no
# keys): ("tool", name) or ("resource", URI), where `{name}` stands for any last segment and a
# query (`?since=...`, a template's `{?since}`) is left out. The same ladder as the routes: the
# agent's loop, then what changes the catalog or labels and what reads the data (the editor's);
# anything about keys, and anything missing here, needs `admin`.
MCP_ROLES: Mapping[tuple[str, str], Role] = {
    ("tool", "search_tools"): "agent",
    ("tool", "report_turn"): "agent",
    ("tool", "label_turn"): "editor",
    ("resource", "toolselect://catalog"): "editor",
    ("resource", "toolselect://analytics"): "editor",
    ("resource", "toolselect://analytics/{name}"): "editor",
}


def required_role(method: str, route: str | None, path: str, *, metrics_auth: bool) -> Role | None:
    """The least role a request needs, or None when it is open. `route` is the matched route
    (None when nothing matched: a `/v1/*` path then needs any valid key before its 404/405)."""
    if path.startswith("/v1/"):
        if route is None:
            return "agent"
        return ROUTE_ROLES.get(("GET" if method == "HEAD" else method, route), "admin")
    if path == METRICS_ROUTE and metrics_auth:
        return "editor"
    return None


def mcp_rule(kind: Literal["tool", "resource"], name: str) -> tuple[str, str] | None:
    """The `MCP_ROLES` entry a tool name, resource URI or URI template falls under, if any."""
    if kind == "resource":
        name = name.split("{?", 1)[0].split("?", 1)[0]
        if (kind, name) not in MCP_ROLES:
            name = name.rpartition("/")[0] + "/{name}"
    return (kind, name) if (kind, name) in MCP_ROLES else None


def mcp_role(kind: Literal["tool", "resource"], name: str) -> Role:
    """The least role an MCP tool call or resource read needs (`admin` without a rule)."""
    rule = mcp_rule(kind, name)
    return "admin" if rule is None else MCP_ROLES[rule]


def allows(role: str, needed: str) -> bool:
    """Whether `role` includes `needed` (admin > editor > agent)."""
    return _RANK.get(role, -1) >= _RANK[needed]


def check_tenant(tenant: object, field: str = "tenant") -> str:
    """`tenant` when it is a tenant id; `InvalidInput` otherwise."""
    if not isinstance(tenant, str) or _TENANT.fullmatch(tenant) is None:
        raise InvalidInput(
            f"expected a tenant id matching {TENANT_PATTERN}, got {shown(tenant)}", field
        )
    return tenant


def tenant_file(path: Path, tenant: str) -> Path:
    """The file of `tenant`'s data (a SQLite store, a spool) given the configured path: the
    `default` tenant's is the path itself (so a file made before tenants is `default`'s), tenant
    `t`'s is `<stem>.tenant-<t><suffix>` beside it; `:memory:` stays (each opener has its own)."""
    if tenant == DEFAULT_TENANT or str(path) == ":memory:":
        return path
    return path.with_name(f"{path.stem}.tenant-{check_tenant(tenant)}{path.suffix}")


def shown(value: object) -> str:
    """A value a caller sent, as a message repeats it (a refused field, an id not found): never
    a key pasted in the wrong place, and a long value cut."""
    if isinstance(value, str) and value.startswith(KEY_PREFIX):
        return "what looks like an API key (not shown)"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def check_role(role: object, field: str = "role") -> Role:
    """`role` when it is one of `ROLES`; `InvalidInput` otherwise."""
    for known in ROLES:
        if role == known:
            return known
    raise InvalidInput(f"expected a role among {', '.join(ROLES)}, got {shown(role)}", field)


def check_name(name: str | None, field: str = "name") -> str | None:
    """A key's optional name: 1..200 characters, not blank."""
    if name is None:
        return None
    if not name.strip() or len(name) > MAX_NAME:
        raise InvalidInput(f"expected a name of 1..{MAX_NAME} characters, not blank", field)
    return name


def key_hash(key: str) -> str:
    """What is stored of a key: its SHA-256, hex. A presented key holding a surrogate (a header
    byte that is not UTF-8, which aiohttp keeps as one) hashes too: it is then no key's."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def new_key(
    tenant: str, role: str, created_at: datetime, name: str | None = None
) -> tuple[str, ApiKey]:
    """A fresh key (shown once to whoever asked for it) and its record (what is stored)."""
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    record = ApiKey(
        id=secrets.token_hex(6),
        hash=key_hash(secret),
        prefix=secret[:PREFIX_CHARS],
        tenant=check_tenant(tenant),
        role=check_role(role),
        created_at=created_at,
        name=check_name(name),
    )
    return secret, record


_KEY_FIELDS = ("id", "hash", "prefix", "tenant", "role", "name")


def key_row(key: ApiKey, write_time: Callable[[datetime], Any]) -> dict[str, Any]:
    """A key's stored properties, one per field (both stores)."""
    row: dict[str, Any] = {name: getattr(key, name) for name in _KEY_FIELDS}
    row["created_at"] = write_time(key.created_at)
    row["revoked_at"] = None if key.revoked_at is None else write_time(key.revoked_at)
    return row


def key_from_row(row: Mapping[str, Any], read_time: Callable[[Any], datetime]) -> ApiKey:
    revoked = row.get("revoked_at")
    return ApiKey(
        id=row["id"],
        hash=row["hash"],
        prefix=row["prefix"],
        tenant=row["tenant"],
        role=check_role(row["role"]),
        created_at=read_time(row["created_at"]),
        name=row.get("name"),
        revoked_at=None if revoked is None else read_time(revoked),
    )


# --- who is calling -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request acts as: the tenant it acts on, its key's role and id (None without
    keys; `config:N` for the N-th key of `TOOLSELECT_API_KEYS`)."""

    tenant: str
    role: Role
    key_id: str | None


# Every request while no key exists at all.
OPEN_CALLER = Caller(DEFAULT_TENANT, "admin", None)


def bearer_token(header: str | None) -> str | None:
    """The key of an `Authorization: Bearer <key>` header; None for any other header."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class KeyRegistry:
    """The keys a process accepts, by SHA-256: the configured ones and the stored active ones.

    A presented key is hashed and looked up, so the time taken says nothing about any key's
    characters. `replace` takes the store's keys (at connect and every poll); `add` and `drop`
    apply this process's own changes at once. Authentication is on (`enabled`) while a key is
    configured or any key is stored, revoked ones included: revoking the last key must not
    open the API to everyone. `loaded` is False until the store was read once: until then
    only configured keys are known.
    """

    def __init__(self, configured: Iterable[str] = ()) -> None:
        self._configured = {
            key_hash(key): Caller(DEFAULT_TENANT, "admin", f"config:{i}")
            for i, key in enumerate(configured, 1)
        }
        self._stored: dict[str, Caller] = {}
        self._any_stored = False
        self.loaded = False
        self.changes = 0  # local add/drop count: a reload read before one is stale

    @property
    def enabled(self) -> bool:
        """Whether any key exists (configured, or stored, revoked or not, as last read)."""
        return bool(self._configured) or self._any_stored

    def __len__(self) -> int:
        """The keys accepted now."""
        return len(self._configured) + len(self._stored)

    def resolve(self, key: str) -> Caller | None:
        """The caller a key stands for; None for an unknown or revoked key."""
        digest = key_hash(key)
        return self._configured.get(digest) or self._stored.get(digest)

    def replace(self, stored: Iterable[ApiKey], *, read_after: int | None = None) -> bool:
        """Take the store's keys (every one: the revoked are kept out, but count as keys);
        ignored, returning False, when local changes happened since the read began
        (`read_after` was `changes` then)."""
        if read_after is not None and read_after != self.changes:
            return False
        keys = list(stored)
        self._stored = {k.hash: Caller(k.tenant, k.role, k.id) for k in keys if k.active}
        self._any_stored = bool(keys)
        self.loaded = True
        return True

    def add(self, key: ApiKey) -> None:
        self._any_stored = True
        if key.active:
            self._stored[key.hash] = Caller(key.tenant, key.role, key.id)
        self.changes += 1

    def drop(self, key_id: str) -> None:
        self._stored = {h: c for h, c in self._stored.items() if c.key_id != key_id}
        self.changes += 1


# --- limits ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Limited:
    """A refused request: which limit (`tenant` or `global`) and when to retry (whole seconds)."""

    scope: Literal["tenant", "global"]
    retry_after_s: int


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float

    def refill(self, now: float, rate: float, size: float) -> None:
        self.tokens = min(size, self.tokens + max(now - self.at, 0.0) * rate)
        self.at = now

    def wait(self, rate: float) -> int:
        return max(1, math.ceil((1.0 - self.tokens) / rate))


def bucket_size(rate: float, burst: int) -> float:
    """Requests a bucket holds: `burst`, or with 0 one second's worth (at least 1)."""
    return float(burst) if burst > 0 else float(max(1, math.ceil(rate)))


class RateLimits:
    """Token buckets: one per tenant (`tenant_rps`, holding `tenant_burst`) and one for all
    (`global_rps`); a rate of 0 is no limit. In memory, per process: N workers or replicas
    let a tenant through up to N times the rate. `now` is monotonic seconds."""

    def __init__(
        self,
        tenant_rps: float = 0.0,
        tenant_burst: int = 0,
        global_rps: float = 0.0,
        *,
        max_tenants: int = 10_000,
    ) -> None:
        self.tenant_rps = tenant_rps
        self.global_rps = global_rps
        self._tenant_size = bucket_size(tenant_rps, tenant_burst)
        self._global_size = bucket_size(global_rps, 0)
        self._tenants: dict[str, _Bucket] = {}
        self._global: _Bucket | None = None
        self._max_tenants = max_tenants

    @property
    def enabled(self) -> bool:
        return self.tenant_rps > 0 or self.global_rps > 0

    def admit(self, tenant: str, now: float) -> Limited | None:
        """Take one request of `tenant` from its bucket and the global one; a `Limited` (and
        nothing taken) when either is empty."""
        bucket = None
        if self.tenant_rps > 0:
            bucket = self._tenants.get(tenant)
            if bucket is None:
                self._prune(now)
                bucket = self._tenants[tenant] = _Bucket(self._tenant_size, now)
            bucket.refill(now, self.tenant_rps, self._tenant_size)
            if bucket.tokens < 1.0:
                return Limited("tenant", bucket.wait(self.tenant_rps))
        if self.global_rps > 0:
            if self._global is None:
                self._global = _Bucket(self._global_size, now)
            self._global.refill(now, self.global_rps, self._global_size)
            if self._global.tokens < 1.0:
                return Limited("global", self._global.wait(self.global_rps))
            self._global.tokens -= 1.0
        if bucket is not None:
            bucket.tokens -= 1.0
        return None

    def _prune(self, now: float) -> None:
        """Past `max_tenants` buckets, forget the full ones (a new bucket starts full anyway)."""
        if len(self._tenants) < self._max_tenants:
            return
        for name, bucket in list(self._tenants.items()):
            bucket.refill(now, self.tenant_rps, self._tenant_size)
            if bucket.tokens >= self._tenant_size:
                del self._tenants[name]
