"""The HTTP leaf: typed app/request keys, JSON bodies in (size, type, Unicode, model) and
JSON responses out. Routes and middleware import this; it imports neither of them."""

from __future__ import annotations

import asyncio
import re
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from toolselect.api.errors import HttpError
from toolselect.api.validation import rejection
from toolselect.json_text import parse_json
from toolselect.keys import DEFAULT_TENANT, Caller
from toolselect.service import Service, TenantServices

SERVICE = web.AppKey("service", Service)
# Every tenant's service (`TenantServices`): `SERVICE` is its `default`.
TENANTS = web.AppKey("tenants", TenantServices)
# The request's time limit, for a handler that knows its work is larger (an import) to move.
DEADLINE = web.RequestKey("deadline", asyncio.Timeout)
# Who the request acts as (tenant, role, key id): set by the middleware on every `/v1/*`
# request it lets through (`request[CALLER]`); `Caller("default", "admin", None)` while no key
# exists at all. Routes that need no key (health, `/openapi.json`, the dashboard) have none.
CALLER = web.RequestKey("caller", Caller)
M = TypeVar("M", bound=BaseModel)


async def tenant_service(request: web.Request) -> Service:
    """The service of the tenant the request acts on: the `default` one for `default` and
    whenever no caller is on the request; another tenant's is started on its first use."""
    caller = request.get(CALLER)
    if caller is None or caller.tenant == DEFAULT_TENANT:
        return request.app[SERVICE]
    return await request.app[TENANTS].get(caller.tenant)


# The codings aiohttp decodes (br and zstd through the Brotli and backports.zstd packages);
# it passes any other through undecoded, which would then fail as JSON for a reason not given.
BODY_CODINGS = frozenset({"", "identity", "gzip", "deflate", "br", "zstd"})


def _check_content_type(request: web.Request) -> None:
    if request.content_type != "application/json":
        raise HttpError(
            415,
            "unsupported_media_type",
            f"expected Content-Type application/json, got {request.content_type or 'none'}",
            "Content-Type",
        )
    # Every header: aiohttp decodes by the last one, so a second one must not slip past.
    codings = [c.strip().lower() for c in request.headers.getall("Content-Encoding", [])]
    coding = ", ".join(codings)
    if len(codings) > 1 or coding not in BODY_CODINGS:
        known = ", ".join(sorted(BODY_CODINGS - {""}))
        raise HttpError(
            415,
            "unsupported_media_type",
            f"expected Content-Encoding among {known}, got {coding!r}",
            "Content-Encoding",
        )


async def _read_raw(request: web.Request) -> bytes:
    """The body's bytes: 415 for another content type, 413 past the limit (aiohttp's own),
    400 when its Content-Encoding does not decode, 499 when the client left before it all came.
    """
    _check_content_type(request)
    try:
        return await request.read()
    except web.RequestPayloadError as exc:
        raise HttpError(400, "invalid_body", f"body cannot be read: {exc}", "body") from None
    except ConnectionResetError:
        # Nobody is left to answer: counted as 499 (the status proxies use) rather than 500.
        raise HttpError(
            499, "client_closed", "the client closed the connection mid-body", "body"
        ) from None


async def read_body(request: web.Request) -> Any:
    """The JSON body: 400 when it is not JSON in UTF-8 (`toolselect.json_text`)."""
    return _json_of(await _read_raw(request))


def _json_of(raw: bytes) -> Any:
    try:
        # Decoded as UTF-8 here: `json.loads` on bytes would also take UTF-16 and a byte order
        # mark, which the routes that parse with their model refuse.
        return parse_json(raw.decode("utf-8"))
    except ValueError as exc:
        raise HttpError(400, "invalid_json", f"body is not JSON: {exc}", "body") from None


def _rejected(exc: ValidationError) -> HttpError:
    """The first validation error as the API answers it (see `toolselect.api.validation`)."""
    status, code, message, field = rejection(exc)
    return HttpError(status, code, message, field)


# pydantic's parser takes NaN, Infinity and 1e400 wherever a model holds any JSON (a candidate's
# `Metadata`, an ignored field), where the standard parser's routes and the exec selector refuse
# them. Only bodies that may hold one are parsed a second time, by that parser.
_MAYBE_NOT_FINITE = re.compile(rb"NaN|Infinity|[eE]\+?[0-9]{3}")


async def read_model(request: web.Request, model: type[M]) -> M:
    """Read and validate a JSON body in one pass (pydantic parses the bytes itself)."""
    raw = await _read_raw(request)
    if _MAYBE_NOT_FINITE.search(raw):
        _json_of(raw)
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise _rejected(exc) from None


def json_response(model: BaseModel, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        text=model.model_dump_json(exclude_none=True),
        content_type="application/json",
    )
