"""The HTTP leaf: typed app/request keys, JSON bodies in (size, type, Unicode, model) and
JSON responses out. Routes and middleware import this; it imports neither of them."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from aiohttp import HttpVersion11, web
from pydantic import BaseModel, ValidationError

from toolselect.api.errors import HttpError
from toolselect.api.validation import rejection
from toolselect.json_text import MAYBE_NOT_FINITE, parse_json
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
# The body as `read_raw` took it (checked, read whole): the handler reads it from here.
BODY = web.RequestKey("body", bytes)
M = TypeVar("M", bound=BaseModel)


async def tenant_service(request: web.Request, *, writes: bool = True) -> Service:
    """The service of the tenant the request acts on: the `default` one for `default` and
    whenever no caller is on the request; another tenant's is started on its first use by a
    request that `writes` its data (a catalog upload, a reported turn). Any other request (a
    read, a ranking, a delete, a label, which needs a catalog tool) gets `UnknownTenant`
    (`404 unknown_tenant`) while the tenant does not exist, rather than make its store."""
    caller = request.get(CALLER)
    if caller is None or caller.tenant == DEFAULT_TENANT:
        return request.app[SERVICE]
    tenants = request.app[TENANTS]
    return await (tenants.get if writes else tenants.existing)(caller.tenant)


# The codings aiohttp decodes (br and zstd through the Brotli and backports.zstd packages);
# it passes any other through undecoded, which would then fail as JSON for a reason not given.
BODY_CODINGS = frozenset({"", "identity", "gzip", "deflate", "br", "zstd"})


def _check_content_type(request: web.Request) -> None:
    if request.content_type != "application/json":
        # aiohttp reads a missing Content-Type as application/octet-stream, which was not sent.
        got = request.content_type if "Content-Type" in request.headers else "none"
        raise HttpError(
            415,
            "unsupported_media_type",
            f"expected Content-Type application/json, got {got}",
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


def check_declared_size(request: web.Request) -> None:
    """`413 too_large` for a body whose Content-Length is over the limit, before any of it is
    read (and before `100 Continue` is sent: `expect_continue`)."""
    limit = request.client_max_size
    declared = request.content_length
    if limit and declared is not None and declared > limit:
        raise HttpError(
            413,
            "too_large",
            f"expected a body of at most {limit} bytes, got Content-Length {declared}",
            "body",
            close=True,
        )


async def expect_continue(request: web.Request) -> web.StreamResponse | None:
    """aiohttp's answer to `Expect: 100-continue` (every route's expect handler: `app.py`), but
    no `100 Continue` for a body declared over the limit, which the middleware then refuses
    with 413 rather than have the client send it first. aiohttp answers what this returns as
    it is, without the middleware."""
    expect = request.headers.get("Expect", "")
    if request.version != HttpVersion11:
        return None
    if expect.lower() != "100-continue":
        error = HttpError(
            417, "expectation_failed", f"expected Expect: 100-continue, got {expect}", "Expect"
        )
        return error.response()
    declared = request.content_length
    if not (request.client_max_size and declared and declared > request.client_max_size):
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    return None


async def read_raw(request: web.Request, timeout_s: float) -> bytes:
    """The body's bytes: 415 for another content type, 413 past the limit (declared or sent),
    400 when its Content-Encoding does not decode, 408 when it has not all come within
    `timeout_s`, 499 when the client left before it all came. Read once: the bytes are kept on
    the request (`BODY`) for the handler."""
    _check_content_type(request)
    check_declared_size(request)
    try:
        async with asyncio.timeout(timeout_s):
            request[BODY] = await request.read()
            return request[BODY]
    except TimeoutError:
        request.app[SERVICE].metrics.http_rejected.labels("body_timeout").inc()
        raise HttpError(
            408,
            "body_timeout",
            f"the body did not all arrive within {timeout_s:g} s",
            "body",
            close=True,
        ) from None
    except web.RequestPayloadError as exc:
        raise HttpError(
            400, "invalid_body", f"body cannot be read: {exc}", "body", close=True
        ) from None
    except ConnectionResetError:
        # Nobody is left to answer: counted as 499 (the status proxies use) rather than 500.
        raise HttpError(
            499, "client_closed", "the client closed the connection mid-body", "body"
        ) from None


async def _read_raw(request: web.Request) -> bytes:
    """The body `read_raw` took before the handler ran (the middleware reads every body first,
    outside the concurrency limit), or read now under the request's own time limit."""
    if BODY in request:
        return request[BODY]
    return await read_raw(request, request.app[SERVICE].settings.request_timeout_s)


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
# them. Only bodies that may hold one (`MAYBE_NOT_FINITE`, that parser's own rule) are parsed a
# second time, by that parser.
async def read_model(request: web.Request, model: type[M]) -> M:
    """Read and validate a JSON body in one pass (pydantic parses the bytes itself)."""
    raw = await _read_raw(request)
    if MAYBE_NOT_FINITE.search(raw):
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
