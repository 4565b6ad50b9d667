"""Who is calling: a bearer key resolved to its `Caller`, and the tenant it acts on. One rule for
the HTTP API's middleware and MCP's HTTP transport (`mcp_auth.py`), as `HttpError`s each surface
answers in the API's error model."""

from __future__ import annotations

from collections.abc import Sequence

from toolselect.api.errors import HttpError
from toolselect.errors import InvalidInput
from toolselect.keys import (
    OPEN_CALLER,
    TENANT_HEADER,
    TENANT_MAX,
    Caller,
    KeyRegistry,
    bearer_token,
    check_tenant,
    shown,
)


def _unauthorized(message: str) -> HttpError:
    return HttpError(
        401, "unauthorized", message, "Authorization", headers={"WWW-Authenticate": "Bearer"}
    )


def one_header(values: Sequence[str], name: str) -> str | None:
    """The one value of header `name`, None without it; `400 bad_request` naming it when sent
    more than once: servers and proxies differ on which of two keys or tenants counts, so none
    is picked."""
    if len(values) > 1:
        raise HttpError(
            400, "bad_request", f"expected at most one {name} header, got {len(values)}", name
        )
    return values[0] if values else None


def authenticate(header: str | None, keys: KeyRegistry) -> Caller:
    """The caller of `Authorization: Bearer <key>`; `OPEN_CALLER` while no key exists at all.
    Until the stored keys were read once (the store down since start) a key not configured
    cannot be checked: `503 not_ready`. A key whose bytes are not UTF-8 is no key's: unknown,
    as any other."""
    token = bearer_token(header)
    caller = None if token is None else keys.resolve(token)
    if caller is not None:
        return caller
    if token is not None and not keys.loaded:
        raise HttpError(
            503,
            "not_ready",
            "API keys not loaded yet: the store has not answered since start",
            "Retry-After",
            headers={"Retry-After": "1"},
        )
    if not keys.enabled:
        return OPEN_CALLER
    if token is None:
        raise _unauthorized("expected Authorization: Bearer <API key>")
    if not token.isascii():
        raise _unauthorized("expected an API key of ASCII characters (Authorization: Bearer)")
    raise _unauthorized("unknown or revoked API key (Authorization: Bearer <API key>)")


def acting_as(wanted: str | None, caller: Caller) -> Caller:
    """The caller on the tenant `X-Toolselect-Tenant` names (`wanted`): only an admin may name
    another; a malformed name is `422`, a non-admin naming another tenant `403`."""
    if wanted is None or wanted == caller.tenant:
        return caller
    try:
        tenant = check_tenant(wanted, TENANT_HEADER)
    except InvalidInput:
        raise HttpError(
            422,
            "invalid_request",
            f"expected {TENANT_HEADER} to be a tenant id (lower-case letters, digits, _ and -, "
            f"1..{TENANT_MAX} characters, starting with a letter or digit)",
            TENANT_HEADER,
        ) from None
    if caller.role != "admin":
        raise HttpError(
            403,
            "forbidden",
            f"expected an admin key to act on another tenant, got a {caller.role} key of "
            f"tenant {caller.tenant!r} asking for {shown(tenant)}",
            TENANT_HEADER,
        )
    return Caller(tenant, caller.role, caller.key_id)
