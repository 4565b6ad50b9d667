"""The one middleware: request id, API keys, limits, concurrency, time limit, error model, metrics.

Outermost first: bind a request id (the caller's `X-Request-Id` when it is 1..128 printable
ASCII characters, a generated one otherwise); resolve the caller (`CALLER`) when keys are on
(configured or stored: `toolselect.keys`), `401 unauthorized` for a missing, unknown or revoked
key, `400 bad_request` for a key or tenant header sent twice, `403 forbidden` for a role below
the route's (`keys.ROUTE_ROLES`) or another tenant asked for by a non-admin key; `429
rate_limited` beyond the tenant's or the process's rate; read the body (`413` for one declared
over the limit, `408 body_timeout` for one that does not all come within the request timeout)
before taking a slot; `503 overloaded` beyond `max_concurrency`; a per-request timeout (which
`PUT /v1/tools` moves as its import progresses: `DEADLINE`); every error translated into the
JSON model; each route counted and timed. One function rather than a chain: each layer of
aiohttp middleware costs a measurable share of a sub-millisecond request. A key never reaches a
log line, a metric label or an error message.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from toolselect.api.callers import acting_as, authenticate, one_header
from toolselect.api.errors import HttpError
from toolselect.api.http import CALLER, DEADLINE, SERVICE, TENANTS, check_declared_size, read_raw
from toolselect.errors import (
    InvalidInput,
    NotFound,
    NotReady,
    StoreUnavailable,
    ToolselectError,
    UnknownTenant,
)
from toolselect.keys import (
    DEFAULT_TENANT,
    TENANT_HEADER,
    RateLimits,
    allows,
    required_role,
)
from toolselect.logs import Repeats

log = structlog.get_logger("toolselect.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_OPEN_PATHS = frozenset({"/healthz", "/readyz"})
# The refusals for the store or the catalog not being there, counted by `http_rejected` (the
# others count themselves where they are refused).
_ABSENT = frozenset({"not_ready", "store_unavailable"})
# The methods whose routes read a JSON body.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# A caller's request id is echoed and put on every log line of the request: printable ASCII
# without spaces, at most 128 characters; any other gets a generated one.
_REQUEST_ID = re.compile(r"[!-~]{1,128}")


def _request_id(request: web.Request) -> str:
    given = request.headers.get("X-Request-Id", "")
    return given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def _route(request: web.Request) -> str | None:
    """The matched route as aiohttp names it (`resource.canonical`); None when none matched."""
    info = request.match_info
    if isinstance(info, web.UrlMappingMatchInfo) and info.route.resource is not None:
        return info.route.resource.canonical
    return None


def _http_error(exc: web.HTTPException) -> HttpError:
    """aiohttp's own refusals (routing, body size) in our error model."""
    if isinstance(exc, web.HTTPNotFound):
        return HttpError(404, "not_found", "no such route", "path")
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return HttpError(
            405,
            "method_not_allowed",
            f"expected one of {allowed}, got {exc.method}",
            "method",
            headers={"Allow": allowed},
        )
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        text = exc.text or "request body too large"
        return HttpError(413, "too_large", text, "body", close=True)
    return HttpError(exc.status, exc.reason.lower().replace(" ", "_"), exc.reason)


@web.middleware
async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The one middleware, in order: bind a request id; check the API key; read the body;
    refuse beyond the concurrency limit; bound the request's time; translate every error into
    the JSON model; count and time the route. (One function rather than a chain: each layer of aiohttp
    middleware costs a measurable share of a sub-millisecond request.)"""
    request_id = _request_id(request)
    structlog.contextvars.bind_contextvars(request_id=request_id)
    app = request.app
    service = app[SERVICE]
    matched = _route(request)
    route = matched or "unmatched"
    started = time.perf_counter()
    error: HttpError | None = None
    try:
        try:
            _authorise(request, matched)
            if matched is not None:
                await _read_body_first(request)
            caller = request.get(CALLER)
            if caller is None or caller.tenant == DEFAULT_TENANT:
                response = await _gated(request, handler)
            else:
                with app[TENANTS].busy(caller.tenant):  # not closed under the request
                    response = await _gated(request, handler)
        except HttpError as exc:
            error = exc
        except InvalidInput as exc:
            error = HttpError(422, "invalid_request", exc.message, exc.field)
        except UnknownTenant as exc:
            error = HttpError(404, "unknown_tenant", str(exc), TENANT_HEADER)
        except NotFound as exc:
            error = HttpError(404, "not_found", str(exc), exc.field)
        except NotReady as exc:
            error = HttpError(
                503, "not_ready", str(exc), "Retry-After", headers={"Retry-After": "1"}
            )
        except StoreUnavailable as exc:
            error = HttpError(503, "store_unavailable", str(exc))
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            error = _http_error(exc)
        except (ToolselectError, Exception):
            log.exception("request_failed", method=request.method, path=request.path)
            error = HttpError(500, "internal", f"internal error (request {request_id})")
        if error is not None:
            response = error.response()
        response.headers["X-Request-Id"] = request_id
        elapsed = time.perf_counter() - started
        service.metrics.http_requests.labels(route, str(response.status)).inc()
        service.metrics.http_latency.labels(route).observe(elapsed)
        if service.metrics.worker_requests is not None:
            service.metrics.worker_requests.inc()
        if error is not None and error.code in _ABSENT and request.path not in _OPEN_PATHS:
            service.metrics.http_rejected.labels(error.code).inc()  # a probe is no request
        if response.status >= 500:
            _log_error(app[REPEATS], route, response.status, elapsed, error)
        return response
    finally:
        structlog.contextvars.unbind_contextvars("request_id")


def _log_error(
    repeats: Repeats, route: str, status: int, elapsed: float, error: HttpError | None
) -> None:
    """One `request_error` line a 5xx, but for the refusals that repeat for as long as their
    cause lasts (`not_ready`, `store_unavailable`, `overloaded`, `timeout`: a busy service
    answers thousands a minute while the store is down): the first of a route and code, then
    at most one a `logs.REPEAT_S`, saying how many it left out (`repeated`); `/metrics` counts
    every one. A 500 is a bug of ours: always logged (`request_failed` has its traceback)."""
    code = error.code if error is not None else str(status)
    fields: dict[str, object] = {"code": code}
    if status != 500:
        left_out = repeats.admit((route, code))
        if left_out is None:
            return
        if left_out:
            fields["repeated"] = left_out
        if error is not None and error.code in _ABSENT:
            fields["error"] = error.message  # the cause: the store's own words
    log.warning("request_error", route=route, status=status, ms=elapsed * 1e3, **fields)


def _authorise(request: web.Request, route: str | None) -> None:
    """Put the caller on the request where a role is needed (`/v1/*`, and `/metrics` if
    asked): 401/403 as the module docstring says, then the rate limits of `/v1/*` (429)."""
    service = request.app[SERVICE]
    needed = required_role(
        request.method, route, request.path, metrics_auth=service.settings.metrics_auth
    )
    # An open `/metrics` still reads a key sent to it: the key picks the tenants shown.
    keyed_scrape = (
        route == "/metrics" and service.keys.enabled and "Authorization" in request.headers
    )
    if needed is None and not keyed_scrape:
        return
    try:
        key = one_header(request.headers.getall("Authorization", []), "Authorization")
        caller = authenticate(key, service.keys)
    except HttpError as exc:
        if exc.status == 401:
            service.metrics.http_rejected.labels("unauthorized").inc()
        raise
    if needed is not None and not allows(caller.role, needed):
        service.metrics.http_rejected.labels("forbidden").inc()
        raise HttpError(
            403,
            "forbidden",
            f"expected a key of role {needed} or above for {request.method} {route}, "
            f"got role {caller.role}",
        )
    try:
        tenant = one_header(request.headers.getall(TENANT_HEADER, []), TENANT_HEADER)
        caller = acting_as(tenant, caller)
    except HttpError as exc:
        if exc.status == 403:
            service.metrics.http_rejected.labels("forbidden").inc()
        raise
    request[CALLER] = caller
    if request.path.startswith("/v1/"):
        _limit(request, caller.tenant)


def _limit(request: web.Request, tenant: str) -> None:
    """`429 rate_limited` with `Retry-After` beyond the tenant's or the process's rate."""
    limits = request.app[LIMITS]
    if not limits.enabled:
        return
    refused = limits.admit(tenant, time.monotonic())
    if refused is None:
        return
    metrics = request.app[SERVICE].metrics
    metrics.rate_limited.labels(tenant, refused.scope).inc()
    request.app[TENANTS].counted(tenant)  # a tenant not running: its series bounded as closed
    metrics.http_rejected.labels("rate_limited").inc()
    if refused.scope == "tenant":
        message = f"tenant {tenant!r} sent more than {limits.tenant_rps:g} requests per second"
    else:
        message = f"more than {limits.global_rps:g} requests per second in all"
    # No part of the request is at fault: `field` names what the caller acts on, the response's
    # Retry-After (as every 503 that carries one does).
    raise HttpError(
        429,
        "rate_limited",
        message,
        "Retry-After",
        headers={"Retry-After": str(refused.retry_after_s)},
    )


LIMITS = web.AppKey("rate_limits", RateLimits)
# Which 5xx lines to log (`_log_error`): this app's, in memory.
REPEATS = web.AppKey("log_repeats", Repeats)


async def _read_body_first(request: web.Request) -> None:
    """Refuse a body declared over the limit (413) on any route; read the body of a route that
    takes one before the request counts against the concurrency limit. A slot stands for work
    of the server's: a client trickling its body (or sending none of what it declared) would
    otherwise hold one for the whole request timeout, and a few such clients would have every
    other request refused `503 overloaded`. The read has the request timeout to itself (`408
    body_timeout` past it); the handler then finds the bytes read and gets its own."""
    if request.method in _BODY_METHODS:
        await read_raw(request, request.app[SERVICE].settings.request_timeout_s)
    else:
        check_declared_size(request)


class Gate:
    """Counts requests in flight; beyond the limit a request is refused at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.inflight = 0


GATE = web.AppKey("gate", Gate)


async def _gated(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse with `503 overloaded` beyond the concurrency limit; bound each request's time.
    Health checks are never refused."""
    if request.path in _OPEN_PATHS:
        return await handler(request)
    gate = request.app[GATE]
    service = request.app[SERVICE]
    if gate.inflight >= gate.limit:
        service.metrics.http_rejected.labels("overloaded").inc()
        raise HttpError(
            503,
            "overloaded",
            f"more than {gate.limit} requests in flight",
            "Retry-After",
            headers={"Retry-After": "1"},
        )
    gate.inflight += 1
    service.metrics.http_inflight.set(gate.inflight)
    try:
        async with asyncio.timeout(service.settings.request_timeout_s) as deadline:
            request[DEADLINE] = deadline
            return await handler(request)
    except TimeoutError:
        service.metrics.http_rejected.labels("timeout").inc()
        raise HttpError(
            503,
            "timeout",
            f"request took longer than {service.settings.request_timeout_s:g} s",
            "Retry-After",
            headers={"Retry-After": "1"},
        ) from None
    finally:
        gate.inflight -= 1
        service.metrics.http_inflight.set(gate.inflight)
