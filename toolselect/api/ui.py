"""The dashboard at `GET /ui`: three static files shipped in `toolselect.ui`, served as they are.

Why the page is public while `/v1/*` needs a key: a browser sends no `Authorization` header when
it navigates, and a cookie session would be a second way in to guard (CSRF, expiry). So the page
holds no data at all; its script asks the JSON API for everything, with the key the user types
once (kept in the tab's `sessionStorage`, sent as `Authorization: Bearer`). With keys configured
and no key typed, every data request is refused `401` by the one API-key check and the page asks
for the key. The Content-Security-Policy allows only this origin's own script, style and fetches:
no inline script, nothing loaded from elsewhere.
"""

from __future__ import annotations

from importlib.resources import files

from aiohttp import web

# name -> content type; nothing else under /ui/ is served (no directory listing, no traversal).
_ASSETS = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "style.css": "text/css",
}

_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidated on every load, so an upgraded server never runs yesterday's script.
    "Cache-Control": "no-cache",
}

UI_ASSETS = web.AppKey("ui_assets", dict[str, bytes])


def _load() -> dict[str, bytes]:
    package = files("toolselect.ui")
    return {name: package.joinpath(name).read_bytes() for name in _ASSETS}


def _response(request: web.Request, name: str) -> web.Response:
    body = request.app[UI_ASSETS][name]
    return web.Response(body=body, content_type=_ASSETS[name], charset="utf-8", headers=_HEADERS)


async def page(request: web.Request) -> web.Response:
    return _response(request, "index.html")


async def asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in _ASSETS:
        raise web.HTTPNotFound()
    return _response(request, name)


def add_ui_routes(app: web.Application) -> None:
    """Serve the dashboard; its files are read once here (a few tens of kB), not per request."""
    app[UI_ASSETS] = _load()
    app.router.add_get("/ui", page)
    app.router.add_get("/ui/", page)
    app.router.add_get("/ui/{name}", asset)
