"""JSON for the errors aiohttp answers before a request reaches the app.

A request line or headers aiohttp cannot parse (a method it does not know, a line or header
over its limits, bytes that are not HTTP) is answered by its connection handler, in plain text,
without the app's middleware. Every other error of the API is JSON with a stable `code`: these
are too, with the status aiohttp chose, `code` `bad_request` and `field` `request`.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from toolselect.api.errors import HttpError


def unreadable_request(reason: str, status: int = 400) -> HttpError:
    """`bad_request` naming the request, for bytes a server's HTTP parser refused before any
    app saw them: aiohttp's here, uvicorn's under `toolselect mcp --transport http`
    (`mcp_http`)."""
    message = f"the request is not HTTP the server reads: {reason}"
    return HttpError(status, "bad_request", message, "request")


class _JsonErrors(RequestHandler):
    __slots__ = ()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # aiohttp's own: it logs, and refuses (ConnectionError) when a response is under way.
        plain = super().handle_error(request, status, exc, message)
        if plain.status >= 500:
            text = "the server could not answer the request"
            error = HttpError(plain.status, "internal", text, "request")
        else:
            reason = exc.message if isinstance(exc, HttpProcessingError) else message
            error = unreadable_request(str(reason), plain.status)
        response = error.response()
        response.force_close()
        return response


class _JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _JsonErrors(self, loop=self._loop, **self._kwargs)


def answer_protocol_errors_in_json(runner: web.BaseRunner) -> None:
    """Make the set-up `runner`'s connections answer protocol errors in JSON (before any site
    of it starts: each connection gets its handler from the server when it opens)."""
    server = runner.server
    if server is None:
        raise RuntimeError("the runner is not set up")
    server.__class__ = _JsonErrorServer
