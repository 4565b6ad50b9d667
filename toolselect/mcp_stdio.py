"""`toolselect mcp` over stdio (`mcp_server.run`): the SDK's transport, with every line that is no
JSON-RPC message answered, ended by SIGTERM or SIGINT as by stdin closing.

The SDK reads each line of stdin as a message and hands the server the error of one it cannot
read, which the server drops: the host would wait on an answer that never comes. JSON-RPC 2.0
answers it, and so does `answer_malformed`, on the server's own write stream: a line that is not
JSON gets `-32700 Parse error` with the parser's position, JSON that is no message `-32600
Invalid Request` with the request's id when it has one (else null), each naming what was wrong
and quoting what was sent cut to 80 characters (`keys.shown`). A blank line carries no message
(a host's writer may add one) and gets no answer. The server keeps serving either way.

A host ends its server by closing stdin, and a supervisor (or a host that gives up waiting) by a
signal. Either way the lifespan closes the service, which drains the learner within the shutdown
timeout, so turns answered `queued` reach the store; then the process exits 0.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import suppress
from typing import Any

import anyio
import structlog
from anyio.abc import ObjectSendStream
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from mcp.types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError, RequestId
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from toolselect.api.validation import explain
from toolselect.keys import shown
from toolselect.mcp_resources import Running
from toolselect.service import Service

log = structlog.get_logger("toolselect.mcp")

# The kinds of JSON-RPC message, as the SDK's validation errors name them first in `loc`.
_REQUEST, _NOTIFICATION = "JSONRPCRequest", "JSONRPCNotification"
_RESPONSE, _ERROR = "JSONRPCResponse", "JSONRPCError"
# How many of a message's errors an answer names: the rest add length, not help.
MAX_PROBLEMS = 5


async def serve_stdio(server: MCPServer[Service], running: Running) -> None:
    """Serve over stdin and stdout until stdin closes, SIGTERM or SIGINT."""
    running.stopped = anyio.Event()
    serving = anyio.CancelScope()
    async with anyio.create_task_group() as group:
        group.start_soon(_stop_on_signal, serving, running.stopped)
        with serving:
            await _serve(server)
        group.cancel_scope.cancel()


async def _serve(server: MCPServer[Service]) -> None:
    """`MCPServer.run_stdio_async`, with `answer_malformed` between stdin and the server."""
    # The low-level server is what `run_stdio_async` runs; the SDK names it no other way.
    lowlevel = server._lowlevel_server
    async with stdio_server() as (lines, write):
        messages, received = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        async with anyio.create_task_group() as group:
            # A clone of the write stream: the server closes its own when it ends, and stdout
            # is written until both are closed.
            group.start_soon(answer_malformed, lines, messages, write.clone())
            await lowlevel.run(received, write, lowlevel.create_initialization_options())
            group.cancel_scope.cancel()


async def answer_malformed(
    lines: ReadStream[SessionMessage | Exception],
    messages: ObjectSendStream[SessionMessage | Exception],
    write: WriteStream[SessionMessage],
) -> None:
    """Pass each message read from stdin (`lines`) on to the server (`messages`) in order, and
    answer each line that is none on `write`, the stream stdout is written from: one writer, so
    an answer never interleaves with the server's lines."""
    # Broken or closed: the server or stdout has ended, and nothing is left to answer to.
    with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        async with lines, messages, write:
            async for item in lines:
                if isinstance(item, SessionMessage):
                    await messages.send(item)
                    continue
                answer = jsonrpc_error(item)
                if answer is not None:
                    log.info("mcp_line_refused", code=answer.error.code, id=answer.id)
                    await write.send(SessionMessage(answer))


def jsonrpc_error(exc: Exception) -> JSONRPCError | None:
    """The JSON-RPC answer to a line the SDK could not read as a message (`exc`, its error):
    `-32700` for a line that is not JSON, `-32600` for JSON that is no message (with its id
    when it has a usable one); None for a blank line."""
    if not isinstance(exc, ValidationError):
        return _error(None, PARSE_ERROR, f"Parse error: {' '.join(str(exc).split())[:200]}")
    errors = exc.errors(include_url=False)
    first = errors[0]
    if first["type"] == "json_invalid":
        line = str(first["input"]).rstrip("\r\n")
        if not line.strip():
            return None
        reason = (first.get("ctx") or {}).get("error", first["msg"])
        return _error(
            None, PARSE_ERROR, f"Parse error: expected JSON, got {shown(line)} ({reason})"
        )
    message = _message(errors)
    kind = _kind(message)
    named = [_inside(e) for e in errors if e["loc"][:1] == (kind,)] or errors
    problems = explain(named[:MAX_PROBLEMS], whole="message")
    return _error(_request_id(message), INVALID_REQUEST, f"Invalid Request: {problems}")


def _error(request_id: RequestId | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


def _message(errors: list[ErrorDetails]) -> Any:
    """The line's JSON value, from the errors that carry it whole: one about the value itself
    (not an object), or a missing field (the object). None when no error does: an object with
    every field of every kind of message, none of them valid."""
    for error in errors:
        loc = error["loc"]
        if len(loc) == 1 or (len(loc) == 2 and error["type"] == "missing"):
            return error["input"]
    return None


def _kind(message: Any) -> str:
    """The kind of message `message` was meant to be, whose errors the answer names: a request
    when nothing tells (what a server is sent)."""
    if isinstance(message, dict):
        if "method" in message:
            return _REQUEST if "id" in message else _NOTIFICATION
        if "result" in message:
            return _RESPONSE
        if "error" in message:
            return _ERROR
    return _REQUEST


def _inside(error: ErrorDetails) -> ErrorDetails:
    """`error` located within its message, not within the kind the SDK tried."""
    inner = error.copy()
    inner["loc"] = error["loc"][1:]
    return inner


def _request_id(message: Any) -> RequestId | None:
    """The message's id when it is one the SDK answers with (a string or an integer), else
    None."""
    found = message.get("id") if isinstance(message, dict) else None
    if isinstance(found, str) or (isinstance(found, int) and not isinstance(found, bool)):
        return found
    return None


async def _stop_on_signal(serving: anyio.CancelScope, stopped: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("mcp_stopping", signal=signal.Signals(signum).name)
            # The lifespan's close is shielded from this cancel (`mcp_server.build_server`).
            serving.cancel()
            await stopped.wait()
            # The SDK's stdin reader is a thread blocked on the host's pipe, which nothing in
            # this process can wake and which the transport waits for before it returns: with
            # the service closed nothing is left to lose, so the process ends here.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
