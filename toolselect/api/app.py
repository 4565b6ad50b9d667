"""The aiohttp application: `create_app(settings)` wires routes, the middleware and the service.

The service is the app's resource: started by a `cleanup_ctx` when the app starts (the store may
still be down: the service answers `not_ready` and keeps connecting in the background) and
closed when the app stops, after in-flight requests. Background work (connecting, flushing the
write backlog, polling for other replicas) belongs to the service. The dashboard's static files
(`/ui`, `api/ui.py`) need no key: they hold no data, and the page reads `/v1/*` with the key
its user types.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from toolselect.api.http import SERVICE
from toolselect.api.middleware import API_KEYS, GATE, Gate, middleware
from toolselect.api.routes import add_routes
from toolselect.api.ui import add_ui_routes
from toolselect.config import Settings
from toolselect.metrics import Metrics
from toolselect.service import Service


def create_app(settings: Settings, *, metrics: Metrics | None = None) -> web.Application:
    """The HTTP API; its service starts with the app and closes with it (`app[SERVICE]`)."""
    app = web.Application(middlewares=[middleware], client_max_size=settings.max_body_bytes)
    app[GATE] = Gate(settings.max_concurrency)
    app[API_KEYS] = tuple(key.encode() for key in settings.api_keys)

    async def service(app: web.Application) -> AsyncIterator[None]:
        app[SERVICE] = await Service.start(settings, metrics=metrics, wait_for_store=True)
        try:
            yield
        finally:
            await app[SERVICE].close()

    app.cleanup_ctx.append(service)
    add_routes(app)
    add_ui_routes(app)
    return app
