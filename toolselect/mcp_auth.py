"""API keys on the MCP server's streamable HTTP transport: who calls, and what they may do.

`KeyGate` wraps the SDK's ASGI app (`mcp_server.run`) and treats every HTTP request as the
HTTP API treats `/v1/*` (`api/middleware.py`), with the same keys: the service's
`KeyRegistry` (`TOOLSELECT_API_KEYS` and the stored keys, read again every poll, so a key
created or revoked anywhere counts here within `TOOLSELECT_POLL_INTERVAL`). With no key at all
it stays open. Otherwise a missing, unknown or revoked key is `401 unauthorized` with
`WWW-Authenticate: Bearer`; `X-Toolselect-Tenant` naming another tenant needs an admin key
(`403 forbidden`); beyond the tenant's or the process's rate, `429 rate_limited` with
`Retry-After` (`keys.RateLimits`, this process's own buckets). Errors are the API's JSON model
(`{"error": {"code", "message", "field"?}}`); a key never reaches a log line or a message.

The caller a request was let in as is `CALLER`, a contextvar: the SDK runs the handler of each
message in the context of the request that carried it. `refusal` is what every tool call and
resource read asks (`ToolselectMCP`): the role `keys.MCP_ROLES` names; the call then acts on
its tenant's service (`mcp_resources.tenant_service`). Over stdio there is no request and no key: `CALLER`
stays None and the host, which started the process, acts as `OPEN_CALLER`.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from typing import Literal

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolselect.api.callers import acting_as, authenticate
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

# The streamable HTTP transport's session header, and how many sessions' keys are remembered.
SESSION_HEADER = "mcp-session-id"
MAX_SESSIONS = 100_000

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


class KeyGate:
    """ASGI middleware in front of the SDK's app: authenticate, then limit, every HTTP request;
    the caller goes in `CALLER` for the tools and resources to check."""

    def __init__(
        self,
        app: ASGIApp,
        service: Callable[[], Service | None],
        settings: Settings,
        tenants: Callable[[], TenantServices | None] = lambda: None,
    ) -> None:
        self.app = app
        self._service = service
        self._tenants = tenants
        self.limits = RateLimits(settings.tenant_rps, settings.tenant_burst, settings.global_rps)
        # The key that opened each session (`mcp-session-id`): the SDK's sessions know no keys,
        # and an id is all another tenant's key would need to use or end one. Newest kept.
        self._owners: OrderedDict[str, str] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            caller = self.admit(headers)
            session = self._session_of(headers.get(SESSION_HEADER), caller)
        except HttpError as exc:
            await _response(exc)(scope, receive, send)
            return
        if session is None and caller.key_id is not None:
            send = self._recording(send, caller.key_id)
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
        if session is not None and scope["method"] == "DELETE":
            self._owners.pop(session, None)

    def _session_of(self, session: str | None, caller: Caller) -> str | None:
        """`session` when the caller's key opened it (or no key did); a session another key
        opened is refused as the SDK refuses one it does not know."""
        owner = self._owners.get(session) if session is not None else None
        if owner is not None and owner != caller.key_id:
            raise HttpError(404, "not_found", "Session not found", SESSION_HEADER)
        return session

    def _recording(self, send: Send, key_id: str) -> Send:
        """`send`, noting the session id a response opens as `key_id`'s."""

        async def recording(message: Message) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", ()):
                    if name.lower() == SESSION_HEADER.encode():
                        self._owners[value.decode("latin-1")] = key_id
                        while len(self._owners) > MAX_SESSIONS:
                            self._owners.popitem(last=False)
            await send(message)

        return recording

    def admit(self, headers: Headers) -> Caller:
        """The caller a request acts as; `HttpError` (401, 403, 422, 429 or 503) when refused."""
        service = self._service()
        if service is None:
            raise HttpError(
                503,
                "not_ready",
                "the toolselect service is not running",
                headers={"Retry-After": "1"},
            )
        caller = authenticate(headers.get("authorization"), service.keys)
        caller = acting_as(headers.get(TENANT_HEADER), caller)
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
                    headers={"Retry-After": str(refused.retry_after_s)},
                )
        return caller


def _response(error: HttpError) -> Response:
    """The API's JSON error model, as a Starlette response."""
    body: dict[str, str] = {"code": error.code, "message": error.message}
    if error.field is not None:
        body["field"] = error.field
    return Response(
        json.dumps({"error": body}, ensure_ascii=False, separators=(",", ":")),
        status_code=error.status,
        headers=error.headers,
        media_type="application/json",
    )
