"""The aiohttp application: `create_app(service)` wires routes, middlewares and background tasks.

Middlewares, outermost first: request context (request id, access log, metrics, error model),
API keys (`401 unauthorized` on `/v1/*` when keys are configured), concurrency limit (`503 overloaded` beyond `max_concurrency`), per-request timeout (which
`PUT /v1/tools` moves as its import progresses: `DEADLINE`). Background
work (connecting, flushing the write backlog, polling for other replicas) belongs to the service.
The dashboard's static files (`/ui`, `api/ui.py`) need no key: they hold no data, and the page
reads `/v1/*` with the key its user types.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog
from aiohttp import web
from pydantic import BaseModel, ValidationError

from toolselect.api.errors import ApiError
from toolselect.api.validation import rejection
from toolselect.errors import InvalidInput, NotFound, NotReady, StoreUnavailable, ToolselectError
from toolselect.service import Service

log = structlog.get_logger("toolselect.api")

SERVICE = web.AppKey("service", Service)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
M = TypeVar("M", bound=BaseModel)

_OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def _route_name(request: web.Request) -> str:
    info = request.match_info
    if isinstance(info, web.UrlMappingMatchInfo) and info.route.resource is not None:
        return info.route.resource.canonical
    return "unmatched"


def _http_error(exc: web.HTTPException) -> ApiError:
    """aiohttp's own refusals (routing, body size) in our error model."""
    if isinstance(exc, web.HTTPNotFound):
        return ApiError(404, "not_found", "no such route")
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return ApiError(
            405,
            "method_not_allowed",
            f"expected one of {allowed}, got {exc.method}",
            headers={"Allow": allowed},
        )
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return ApiError(413, "too_large", exc.text or "request body too large", "body")
    return ApiError(exc.status, exc.reason.lower().replace(" ", "_"), exc.reason)


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
        except ApiError as exc:
            response = exc.response()
        except InvalidInput as exc:
            response = ApiError(422, "invalid_request", exc.message, exc.field).response()
        except NotFound as exc:
            response = ApiError(404, "not_found", str(exc)).response()
        except NotReady as exc:
            response = ApiError(503, "not_ready", str(exc), headers={"Retry-After": "1"}).response()
        except StoreUnavailable as exc:
            log.warning("store_unavailable", error=str(exc))
            response = ApiError(503, "store_unavailable", str(exc)).response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = _http_error(exc).response()
        except (ToolselectError, Exception):
            log.exception("request_failed", method=request.method, path=request.path)
            response = ApiError(
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
        raise ApiError(
            401,
            "unauthorized",
            "expected Authorization: Bearer <API key>",
            "Authorization",
            headers={"WWW-Authenticate": "Bearer"},
        )


class _Gate:
    """Counts requests in flight; beyond the limit a request is refused at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.inflight = 0


GATE = web.AppKey("gate", _Gate)
# The request's time limit, for a handler that knows its work is larger (an import) to move.
DEADLINE = web.RequestKey("deadline", asyncio.Timeout)


async def _gated(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse with `503 overloaded` beyond the concurrency limit; bound each request's time.
    Health checks are never refused."""
    if request.path in _OPEN_PATHS:
        return await handler(request)
    gate = request.app[GATE]
    service = request.app[SERVICE]
    if gate.inflight >= gate.limit:
        service.metrics.http_rejected.labels("overloaded").inc()
        raise ApiError(
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
        raise ApiError(
            503,
            "timeout",
            f"request took longer than {service.settings.request_timeout_s:g} s",
            headers={"Retry-After": "1"},
        ) from None
    finally:
        gate.inflight -= 1
        service.metrics.http_inflight.set(gate.inflight)


def _check_content_type(request: web.Request) -> None:
    if request.content_type != "application/json":
        raise ApiError(
            415,
            "unsupported_media_type",
            f"expected Content-Type application/json, got {request.content_type or 'none'}",
            "Content-Type",
        )


async def read_body(request: web.Request) -> Any:
    """The JSON body: 415 for another content type, 413 past the limit, 400 when not JSON."""
    _check_content_type(request)
    raw = await request.read()
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"body is not JSON: {exc}", "body") from None
    if _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(data):
        raise ApiError(
            400,
            "invalid_json",
            "body is not Unicode text: it escapes a lone UTF-16 surrogate (\\uD800-\\uDFFF)",
            "body",
        )
    return data


# JSON may escape half of a UTF-16 pair ("\\ud800"): json.loads accepts it, but it is not text
# and no store can encode it. Only bodies with such an escape are walked.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode()
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _rejected(exc: ValidationError) -> ApiError:
    """The first validation error as the API answers it (see `toolselect.api.validation`)."""
    status, code, message, field = rejection(exc)
    return ApiError(status, code, message, field)


def validate(model: type[M], data: Any) -> M:
    """Validate a parsed body (the CLI's stdin, say) against a request model."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _rejected(exc) from None


async def read_model(request: web.Request, model: type[M]) -> M:
    """Read and validate a JSON body in one pass (pydantic parses the bytes itself)."""
    _check_content_type(request)
    raw = await request.read()
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


def create_app(service: Service) -> web.Application:
    """The HTTP API over a started service (the caller owns the service's lifetime)."""
    from toolselect.api.routes import add_routes
    from toolselect.api.ui import add_ui_routes

    app = web.Application(
        middlewares=[middleware],
        client_max_size=service.settings.max_body_bytes,
    )
    app[SERVICE] = service
    app[GATE] = _Gate(service.settings.max_concurrency)
    app[API_KEYS] = tuple(key.encode() for key in service.settings.api_keys)
    add_routes(app)
    add_ui_routes(app)
    return app
