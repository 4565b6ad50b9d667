"""The one middleware: request id, API keys, concurrency limit, time limit, error model, metrics.

Outermost first: bind a request id; `401 unauthorized` on `/v1/*` when keys are configured;
`503 overloaded` beyond `max_concurrency`; a per-request timeout (which `PUT /v1/tools` moves as
its import progresses: `DEADLINE`); every error translated into the JSON model; each route
counted and timed. One function rather than a chain: each layer of aiohttp middleware costs a
measurable share of a sub-millisecond request.
"""

from __future__ import annotations

import asyncio
import hmac
import time
import uuid
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from toolselect.api.errors import HttpError
from toolselect.api.http import DEADLINE, SERVICE
from toolselect.errors import InvalidInput, NotFound, NotReady, StoreUnavailable, ToolselectError

log = structlog.get_logger("toolselect.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def _route_name(request: web.Request) -> str:
    info = request.match_info
    if isinstance(info, web.UrlMappingMatchInfo) and info.route.resource is not None:
        return info.route.resource.canonical
    return "unmatched"


def _http_error(exc: web.HTTPException) -> HttpError:
    """aiohttp's own refusals (routing, body size) in our error model."""
    if isinstance(exc, web.HTTPNotFound):
        return HttpError(404, "not_found", "no such route")
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return HttpError(
            405,
            "method_not_allowed",
            f"expected one of {allowed}, got {exc.method}",
            headers={"Allow": allowed},
        )
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return HttpError(413, "too_large", exc.text or "request body too large", "body")
    return HttpError(exc.status, exc.reason.lower().replace(" ", "_"), exc.reason)


@web.middleware
async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The one middleware, in order: bind a request id; check the API key; refuse beyond the
    concurrency limit; bound the request's time; translate every error into the JSON model;
    count and time the route. (One function rather than a chain: each layer of aiohttp
    middleware costs a measurable share of a sub-millisecond request.)"""
    request_id = request.headers.get("X-Request-Id") or uuid.uuid4().hex
    structlog.contextvars.bind_contextvars(request_id=request_id)
    app = request.app
    service = app[SERVICE]
    route = _route_name(request)
    started = time.perf_counter()
    try:
        try:
            _check_key(request)
            response = await _gated(request, handler)
        except HttpError as exc:
            response = exc.response()
        except InvalidInput as exc:
            response = HttpError(422, "invalid_request", exc.message, exc.field).response()
        except NotFound as exc:
            response = HttpError(404, "not_found", str(exc), exc.field).response()
        except NotReady as exc:
            response = HttpError(
                503, "not_ready", str(exc), headers={"Retry-After": "1"}
            ).response()
        except StoreUnavailable as exc:
            log.warning("store_unavailable", error=str(exc))
            response = HttpError(503, "store_unavailable", str(exc)).response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = _http_error(exc).response()
        except (ToolselectError, Exception):
            log.exception("request_failed", method=request.method, path=request.path)
            response = HttpError(
                500, "internal", f"internal error (request {request_id})"
            ).response()
        response.headers["X-Request-Id"] = request_id
        elapsed = time.perf_counter() - started
        service.metrics.http_requests.labels(route, str(response.status)).inc()
        service.metrics.http_latency.labels(route).observe(elapsed)
        if service.metrics.worker_requests is not None:
            service.metrics.worker_requests.inc()
        if response.status >= 500:
            log.warning("request_error", route=route, status=response.status, ms=elapsed * 1e3)
        return response
    finally:
        structlog.contextvars.unbind_contextvars("request_id")


def _authorised(header: str, keys: tuple[bytes, ...]) -> bool:
    """Constant-time check of `Bearer <key>` against every configured key (all are compared,
    so the time taken says nothing about which key nearly matched)."""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        return False
    given = token.strip().encode()
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(given, key)
    return matched


API_KEYS = web.AppKey("api_keys", tuple[bytes, ...])


def _check_key(request: web.Request) -> None:
    """With API keys configured, `/v1/*` (and `/metrics` if asked) need a bearer key."""
    keys = request.app[API_KEYS]
    if not keys:
        return
    path = request.path
    guarded = path.startswith("/v1/") or (
        path == "/metrics" and request.app[SERVICE].settings.metrics_auth
    )
    if guarded and not _authorised(request.headers.get("Authorization", ""), keys):
        request.app[SERVICE].metrics.http_rejected.labels("unauthorized").inc()
        raise HttpError(
            401,
            "unauthorized",
            "expected Authorization: Bearer <API key>",
            "Authorization",
            headers={"WWW-Authenticate": "Bearer"},
        )


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
            headers={"Retry-After": "1"},
        ) from None
    finally:
        gate.inflight -= 1
        service.metrics.http_inflight.set(gate.inflight)
