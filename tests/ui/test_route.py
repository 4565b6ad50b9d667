"""`GET /ui` and its files over HTTP, without a browser: public, typed, locked down by CSP."""

from __future__ import annotations

import pytest

from tests.live import LiveServer
from tests.ui.conftest import call


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/ui", "text/html"),
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/style.css", "text/css"),
    ],
)
def test_page_and_files_need_no_key(keyed_server: LiveServer, path: str, content_type: str) -> None:
    """With API keys configured the dashboard's files are served without one (they hold no
    data), with their content type and a CSP that allows only this origin."""
    reply = call(keyed_server.url, "GET", path)
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith(content_type)
    csp = reply.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert reply.headers["X-Content-Type-Options"] == "nosniff"


def test_data_still_needs_the_key(keyed_server: LiveServer) -> None:
    """Serving the page opens nothing else: the JSON API answers 401 without the key."""
    assert call(keyed_server.url, "GET", "/v1/analytics/confusions").status == 401
    assert call(keyed_server.url, "GET", "/v1/tools").status == 401


@pytest.mark.parametrize("name", ["secret.txt", "__init__.py", "..%2F..%2Fpyproject.toml"])
def test_only_the_shipped_files_are_served(server: LiveServer, name: str) -> None:
    """Any other name under /ui/ is a 404 in the API's error model, never a file read."""
    reply = call(server.url, "GET", f"/ui/{name}")
    assert reply.status == 404
    assert reply.body["error"]["code"] == "not_found"
