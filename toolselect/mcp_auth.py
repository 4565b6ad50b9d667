"""API keys on the MCP server's streamable HTTP transport: who calls, and what they may do.

`KeyGate` wraps the SDK's ASGI app (`mcp_http.http_app`) and treats every HTTP request as the
HTTP API treats `/v1/*` (`api/middleware.py`), with the same keys: the service's
`KeyRegistry` (`TOOLSELECT_API_KEYS` and the stored keys, read again every poll, so a key
created or revoked anywhere counts here within `TOOLSELECT_POLL_INTERVAL`). With no key at all
it stays open. Otherwise a missing, unknown or revoked key is `401 unauthorized` with
`WWW-Authenticate: Bearer`; `Authorization` or `X-Toolselect-Tenant` sent twice is `400
bad_request`; `X-Toolselect-Tenant` naming another tenant needs an admin key (`403
forbidden`); beyond the tenant's or the process's rate, `429 rate_limited` with
`Retry-After` (`keys.RateLimits`, this process's own buckets). Errors are the API's JSON model
(`{"error": {"code", "message", "field"?}}`); a key never reaches a log line or a message.

The caller a request was let in as is `CALLER`, a contextvar: the SDK runs the handler of each
message in the context of the request that carried it. `refusal` is what every tool call and
resource read asks (`ToolselectMCP`): the role `keys.MCP_ROLES` names; the call then acts on
its tenant's service (`Running.tenant_service` in `mcp_resources`). Over stdio there is no
request and no key: `CALLER` stays None and the host, which started the process, acts as `OPEN_CALLER`.

Sessions: the SDK's sessions know no keys, so `SessionOwners` records the key that opened each
one, refuses it to any other key (`404`, as a session that does not exist), and holds each key
to `MAX_SESSIONS_PER_KEY` open sessions (`429 too_many_sessions` with `Retry-After`): the
SDK's own bound is one for the whole process, which one key could otherwise fill for every
tenant until its sessions idle out. An owner is forgotten only once the SDK no longer holds its
session (ended by a DELETE, idle, or never opened).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from typing import Literal

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolselect.api.callers import acting_as, authenticate, one_header
from toolselect.api.errors import HttpError
from toolselect.config import Settings
from toolselect.keys import (
    DEFAULT_TENANT,
    OPEN_CALLER,
    TENANT_HEADER,
    Caller,
    RateLimits,
    allows,
    mcp_role,
)
from toolselect.service import Service, TenantServices

# The streamable HTTP transport's session header.
SESSION_HEADER = "mcp-session-id"
# The sessions one key may hold open at once, a tenth of the SDK's bound for the process (10,000):
# a host holds one per connection, an agent fleet sharing a key one per agent, and sessions a
# client never ends count until they idle out (30 minutes).
MAX_SESSIONS_PER_KEY = 1_000
# What a key at its bound is told to wait: a session frees when its client ends it or it idles out.
SESSIONS_RETRY_AFTER_S = 60

# Who the current MCP request acts as; None off HTTP (stdio, an in-process client).
CALLER: ContextVar[Caller | None] = ContextVar("toolselect_mcp_caller", default=None)


def current_caller() -> Caller:
    """The caller of the tool call or resource read being served."""
    return CALLER.get() or OPEN_CALLER


def refusal(kind: Literal["tool", "resource"], name: str) -> str | None:
    """Why the current caller may not call tool `name` or read resource `name`: None when it
    may: a role below the rule's."""
    caller = current_caller()
    needed = mcp_role(kind, name)
    if not allows(caller.role, needed):
        return (
            f"forbidden: expected a key of role {needed} or above for {kind} {name}, "
            f"got role {caller.role}"
        )
    return None


class SessionOwners:
    """The key that opened each session the SDK holds, and how many each key holds or is
    opening. `live` is the SDK's own set of session ids: an owner whose session it no longer
    holds is forgotten (an owner is never evicted while its session lives)."""

    def __init__(self, live: Callable[[], Collection[str]], per_key: int) -> None:
        self._live = live
        self.per_key = per_key
        self._owner: dict[str, str] = {}  # session -> key id
        self._held: dict[str, set[str]] = {}  # key id -> its sessions
        self._opening: dict[str, int] = {}  # key id -> its opening requests being served

    def __len__(self) -> int:
        """How many sessions' owners are recorded."""
        return len(self._owner)

    def owner(self, session: str) -> str | None:
        return self._owner.get(session)

    @contextmanager
    def opening(self, key_id: str) -> Iterator[Callable[[str], None]]:
        """Room for one more session of `key_id` while the request that may open it is served
        (counted from now, so concurrent requests cannot overshoot); yields what to call with
        the id the SDK answers. `HttpError` 429 when the key holds its `per_key` already."""
        if self._count(key_id) >= self.per_key:
            self._prune(self._held.get(key_id, set()))
        if self._count(key_id) >= self.per_key:
            raise HttpError(
                429,
                "too_many_sessions",
                f"this key holds {self.per_key:,} open MCP sessions, the most one key may; "
                "end one (DELETE with its mcp-session-id) or wait for one to idle out",
                headers={"Retry-After": str(SESSIONS_RETRY_AFTER_S)},
            )
        self._opening[key_id] = self._opening.get(key_id, 0) + 1
        pending = True

        def opened(session: str) -> None:
            nonlocal pending
            if pending:
                pending = False
                self._release(key_id)
                self._owner[session] = key_id
                self._held.setdefault(key_id, set()).add(session)

        try:
            yield opened
        finally:
            if pending:
                self._release(key_id)
            # Owners of sessions that ended unseen (idle) go, all at once, when they have come to
            # outnumber the live sessions: memory follows the SDK's sessions at O(1) a request.
            if len(self._owner) > 2 * len(self._live()) + 64:
                self._prune(set(self._owner))

    def settle(self, session: str) -> None:
        """After a request on `session`: its owner forgotten if the SDK no longer holds it (a
        DELETE that succeeded), kept while it lives (a DELETE the SDK refused)."""
        self._prune({session})

    def _count(self, key_id: str) -> int:
        return len(self._held.get(key_id, ())) + self._opening.get(key_id, 0)

    def _release(self, key_id: str) -> None:
        left = self._opening[key_id] - 1
        if left:
            self._opening[key_id] = left
        else:
            del self._opening[key_id]

    def _prune(self, sessions: set[str]) -> None:
        live = self._live()
        for session in [s for s in sessions if s not in live]:
            key_id = self._owner.pop(session, None)
            if key_id is None:
                continue
            held = self._held[key_id]
            held.discard(session)
            if not held:
                del self._held[key_id]


class KeyGate:
    """ASGI middleware in front of the SDK's app: authenticate, then limit, every HTTP request;
    the caller goes in `CALLER` for the tools and resources to check."""

    def __init__(
        self,
        app: ASGIApp,
        service: Callable[[], Service | None],
        settings: Settings,
        tenants: Callable[[], TenantServices | None] = lambda: None,
        *,
        live: Callable[[], Collection[str]],
        sessions_per_key: int = MAX_SESSIONS_PER_KEY,
    ) -> None:
        self.app = app
        self._service = service
        self._tenants = tenants
        self.limits = RateLimits(settings.tenant_rps, settings.tenant_burst, settings.global_rps)
        # `live`: the ids of the sessions the SDK holds (`mcp_http.http_app`).
        self.sessions = SessionOwners(live, sessions_per_key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        session = headers.get(SESSION_HEADER)
        with ExitStack() as stack:
            try:
                caller = self.admit(headers)
                owner = self.sessions.owner(session) if session is not None else None
                if owner is not None and owner != caller.key_id:
                    # Another key's session is answered as the SDK answers one it does not know.
                    raise HttpError(404, "not_found", "Session not found", SESSION_HEADER)
                if session is None and caller.key_id is not None:
                    opened = stack.enter_context(self.sessions.opening(caller.key_id))
                    send = _noting_session(send, opened)
            except HttpError as exc:
                await _response(exc)(scope, receive, send)
                return
            try:
                await self._serve(caller, scope, receive, send)
            finally:
                if session is not None:
                    self.sessions.settle(session)

    async def _serve(self, caller: Caller, scope: Scope, receive: Receive, send: Send) -> None:
        token = CALLER.set(caller)
        tenants = self._tenants()
        try:
            if tenants is None or caller.tenant == DEFAULT_TENANT:
                await self.app(scope, receive, send)
            else:
                with tenants.busy(caller.tenant):  # not closed under the request
                    await self.app(scope, receive, send)
        finally:
            CALLER.reset(token)

    def admit(self, headers: Headers) -> Caller:
        """The caller a request acts as; `HttpError` (400, 401, 403, 422, 429 or 503) when
        refused."""
        service = self._service()
        if service is None:
            raise HttpError(
                503,
                "not_ready",
                "the toolselect service is not running",
                "Retry-After",
                headers={"Retry-After": "1"},
            )
        key = one_header(headers.getlist("authorization"), "Authorization")
        caller = authenticate(key, service.keys)
        caller = acting_as(one_header(headers.getlist(TENANT_HEADER), TENANT_HEADER), caller)
        if self.limits.enabled:
            refused = self.limits.admit(caller.tenant, time.monotonic())
            if refused is not None:
                if refused.scope == "tenant":
                    message = (
                        f"tenant {caller.tenant!r} sent more than "
                        f"{self.limits.tenant_rps:g} requests per second"
                    )
                else:
                    message = f"more than {self.limits.global_rps:g} requests per second in all"
                raise HttpError(
                    429,
                    "rate_limited",
                    message,
                    "Retry-After",
                    headers={"Retry-After": str(refused.retry_after_s)},
                )
        return caller


def _noting_session(send: Send, opened: Callable[[str], None]) -> Send:
    """`send`, telling `opened` the session id a successful response opens."""

    async def noting(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] < 400:
            for name, value in message.get("headers", ()):
                if name.lower() == SESSION_HEADER.encode():
                    opened(value.decode("latin-1"))
        await send(message)

    return noting


def _response(error: HttpError) -> Response:
    """The API's JSON error model, as a Starlette response."""
    return Response(
        error.body(),
        status_code=error.status,
        headers=error.headers,
        media_type="application/json",
    )
