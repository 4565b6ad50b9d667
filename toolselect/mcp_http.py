"""`toolselect mcp --transport http` (`mcp_server.run`): the SDK's streamable HTTP app behind the
API keys (`mcp_auth.KeyGate`), served by uvicorn, whose protocol errors are answered in JSON.

A request line or header uvicorn's parser cannot read (bytes that are not HTTP, TLS sent to the
plain port, a malformed header) is answered by the connection's protocol before any app sees it,
in uvicorn's plain text. Every other error of this server is the API's JSON (`{"error": {"code",
"message", "field"}}`): these are too, as the HTTP API answers them (`api/protocol.py`):
`400 bad_request` naming the `request`, with the parser's reason, and the connection closed.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import structlog
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import DEFAULT_SESSION_IDLE_TIMEOUT
from uvicorn.protocols.http.h11_impl import H11Protocol

from toolselect.api.protocol import unreadable_request
from toolselect.config import Settings
from toolselect.keys import KEY_PREFIX
from toolselect.mcp_auth import MAX_SESSIONS_PER_KEY, KeyGate
from toolselect.mcp_resources import Running
from toolselect.service import Service

log = structlog.get_logger("toolselect.mcp")

# The parser's reason as the answer repeats it: h11's quotes the offending line, which may be
# as long as the parser's buffer (16 KiB).
MAX_REASON = 120


def http_app(
    server: MCPServer[Service],
    running: Running,
    settings: Settings,
    *,
    sessions_per_key: int = MAX_SESSIONS_PER_KEY,
    session_idle_timeout_s: float = DEFAULT_SESSION_IDLE_TIMEOUT,
) -> KeyGate:
    """The SDK's streamable HTTP app (at `/mcp`) behind the API keys' `KeyGate`, which holds
    each key to `sessions_per_key` of the sessions the SDK holds."""
    app = server.streamable_http_app(
        host=settings.host, session_idle_timeout=session_idle_timeout_s
    )
    manager = server.session_manager
    return KeyGate(
        app,
        lambda: running.service,
        settings,
        lambda: running.tenants,
        # The SDK tells no one when a session ends (a DELETE, idling out): the gate asks its
        # table of live sessions, which it has no public name for.
        live=lambda: manager._server_instances,
        sessions_per_key=sessions_per_key,
    )


def http_config(
    server: MCPServer[Service], running: Running, settings: Settings, **app_options: Any
) -> uvicorn.Config:
    """How `serve_http` runs uvicorn: `http_app` (given `app_options`) at `settings.host:port`,
    with the protocol that answers parse errors in JSON."""
    return uvicorn.Config(
        http_app(server, running, settings, **app_options),
        host=settings.host,
        port=settings.port,
        http=json_errors_protocol(),
        # No logging config of uvicorn's own: its access lines would go to stdout; through the
        # root logger they reach stderr like every other line.
        log_config=None,
        access_log=settings.log_level == "debug",
    )


async def serve_http(server: MCPServer[Service], running: Running, settings: Settings) -> None:
    """Serve at `settings.host:port/mcp` until SIGINT or SIGTERM; uvicorn then raises the
    signal again, so the process ends as killed by it (the lifespan has closed the service)."""
    log.info("mcp_http_starting", url=f"http://{settings.host}:{settings.port}/mcp")
    await uvicorn.Server(http_config(server, running, settings)).serve()


def json_errors_protocol() -> type[asyncio.Protocol]:
    """The HTTP/1.1 protocol uvicorn's `auto` picks (httptools when installed, else h11), with
    its parse errors answered in JSON."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # no httptools: `auto` is h11
        return _H11JsonErrors

    class _HttpToolsJsonErrors(HttpToolsProtocol):
        def send_400_response(self, msg: str) -> None:
            _answer_400(self.transport, self.server_state.default_headers, msg)

    return _HttpToolsJsonErrors


class _H11JsonErrors(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        # Written past h11's state machine, as the httptools protocol writes its own: the
        # connection closes with this answer, so h11 has nothing left to keep in step.
        _answer_400(self.transport, self.server_state.default_headers, msg)


def _answer_400(
    transport: asyncio.Transport, default_headers: list[tuple[bytes, bytes]], msg: str
) -> None:
    """Write the API's `400 bad_request` and close, as uvicorn's own `send_400_response` does."""
    # Both protocols call `send_400_response` while they handle the parser's error, whose
    # words say what was wrong; uvicorn's `msg` only says that something was.
    exc = sys.exception()
    body = unreadable_request(_reason(exc) if exc is not None else msg).body().encode()
    head = [b"HTTP/1.1 400 Bad Request\r\n"]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head += [
        b"content-type: application/json\r\n",
        b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
        b"connection: close\r\n\r\n",
    ]
    transport.write(b"".join(head) + body)
    transport.close()


def _reason(exc: BaseException) -> str:
    """The parser's words on one line, cut to `MAX_REASON`, and never a key a header held."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if KEY_PREFIX in text:
        text = text[: text.index(KEY_PREFIX)] + "(what looks like an API key, not shown)"
    return text if len(text) <= MAX_REASON else f"{text[: MAX_REASON - 3]}..."
