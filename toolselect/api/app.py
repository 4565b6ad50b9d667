"""The aiohttp application: `create_app(service)` wires routes and the middleware over a service.

`create_app(service)` serves a composed, started `Service` that its caller owns and closes (a
test can build one with its own parts) as the `default` tenant's; other tenants' services are
started around it (`TenantServices`) and closed with the app. `create_app_from_settings(settings)`
is what the server runs: the services are the app's resource (`TENANTS`, whose `default` is
`SERVICE`), started by a `cleanup_ctx` when the app starts (the store may still be down: the
service answers `not_ready` and keeps connecting in the background) and closed when the app
stops, after in-flight requests. Background work
(connecting, flushing the write backlog, polling for other replicas) belongs to the service.
The dashboard's static files (`/ui`, `api/ui.py`) need no key: they hold no data, and the page
reads `/v1/*` with the key its user types. The API keys are the service's (`service.keys`, kept
in step with the store by its upkeep); the rate limits (`LIMITS`) are this app's, in memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from toolselect.api.http import SERVICE, TENANTS, expect_continue
from toolselect.api.key_routes import add_key_routes
from toolselect.api.middleware import GATE, LIMITS, REPEATS, Gate, middleware
from toolselect.api.routes import add_routes
from toolselect.api.ui import add_ui_routes
from toolselect.config import Settings
from toolselect.keys import RateLimits
from toolselect.logs import Repeats
from toolselect.metrics import Metrics
from toolselect.service import Service, TenantServices


def _app(settings: Settings) -> web.Application:
    """Routes and the middleware on these settings; `app[SERVICE]` is the caller's to set."""
    app = web.Application(middlewares=[middleware], client_max_size=settings.max_body_bytes)
    app[GATE] = Gate(settings.max_concurrency)
    app[LIMITS] = RateLimits(settings.tenant_rps, settings.tenant_burst, settings.global_rps)
    app[REPEATS] = Repeats()
    add_routes(app)
    add_key_routes(app)
    add_ui_routes(app)
    for route in app.router.routes():
        # aiohttp takes an expect handler only route by route (`add_route`), and its default
        # sends `100 Continue` whatever the declared size: set on every route once they exist.
        route._expect_handler = expect_continue
    return app


def create_app(service: Service) -> web.Application:
    """The HTTP API over a started `service` (`app[SERVICE]`); the caller closes it, after the
    app has stopped."""
    app = _app(service.settings)
    app[SERVICE] = service
    app[TENANTS] = TenantServices(service)

    async def tenants(app: web.Application) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await app[TENANTS].close_others()

    app.cleanup_ctx.append(tenants)
    return app


def create_app_from_settings(
    settings: Settings, *, metrics: Metrics | None = None
) -> web.Application:
    """The HTTP API with its own services: started with the app, closed with it (`app[TENANTS]`,
    whose `default` is `app[SERVICE]`)."""
    app = _app(settings)

    async def service(app: web.Application) -> AsyncIterator[None]:
        tenants = await TenantServices.start(settings, metrics=metrics, wait_for_store=True)
        app[TENANTS] = tenants
        app[SERVICE] = tenants.default
        try:
            yield
        finally:
            await tenants.close()

    app.cleanup_ctx.append(service)
    return app
