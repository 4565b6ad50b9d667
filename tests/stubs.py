"""Local HTTP stubs standing in for paid or remote services (LLM teachers, embedding endpoints).

A stub is a real aiohttp server on 127.0.0.1: the real SDK or HTTP client talks to it over TCP,
and each test scripts the answers (status, JSON, headers, hangs) in order, or computes them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

ANTHROPIC_MODEL = "claude-haiku-4-5"


def anthropic_message(
    tool: Any, *, name: str = "choose_tool", tokens: tuple[int, int] = (120, 12)
) -> Any:
    """A Messages API answer in the real wire format, calling `name` with {"tool": tool}."""
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": ANTHROPIC_MODEL,
        "content": [
            {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": name,
             "input": {"tool": tool}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]},
    }  # fmt: skip


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a status with a body (JSON or raw text), headers, or a hang."""

    status: int = 200
    body: Any = None
    text: str | None = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False
    # Answered (as scripted) only once the test sets `release`: a slow teacher it controls.
    held: bool = False
    gzip: bool = False  # the body compressed (when the client accepts gzip)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


Responder = Callable[[Any], Reply]


class Stub:
    """Serves `script` in order (the last reply repeats) and records every request received.

    With a `responder`, each reply is computed from the request body instead (a teacher that
    answers the right label for each request, say); the script then is not used.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.responder: Responder | None = None
        self.script: list[Reply] = []
        self.received: list[Received] = []
        self.release = asyncio.Event()
        self.arrived = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        self.received.append(Received(request.path, dict(request.headers), body))
        self.arrived.set()
        if self.responder is not None:
            reply = self.responder(body)
        elif not self.script:
            return web.json_response({"error": "unscripted"}, status=599)
        else:
            reply = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if reply.held:
            await self.release.wait()
        if reply.hang:
            # Held until the test ends (the client gives up first), then answered so the
            # server can shut down without waiting.
            await self.release.wait()
            return web.json_response({}, status=504)
        if reply.text is not None:
            return web.Response(
                status=reply.status,
                text=reply.text,
                content_type=reply.content_type,
                headers=reply.headers,
            )
        response = web.json_response(reply.body, status=reply.status, headers=reply.headers)
        if reply.gzip:
            response.enable_compression(web.ContentCoding.gzip)
        return response

    def reply(self, *replies: Reply) -> None:
        self.script.extend(replies)


async def start_stub(path: str) -> AsyncIterator[Stub]:
    stub = Stub(path)
    app = web.Application()
    app.router.add_post(path, stub.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    stub.url = str(server.make_url("")).rstrip("/")
    try:
        yield stub
    finally:
        stub.release.set()
        await server.close()


def anthropic_reply(content: list[dict[str, Any]], stop_reason: str = "tool_use") -> Any:
    """A Messages API answer in the real wire format with the given content blocks."""
    return {
        "id": "msg_01TOOLSEARCH",
        "type": "message",
        "role": "assistant",
        "model": ANTHROPIC_MODEL,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 200, "output_tokens": 20},
    }


def claude_with_tool_search(search_tool: str, query: str) -> Responder:
    """Plays Claude using a custom tool search, from the conversation it is sent:

    a user's words -> a `search_tool` call with `query`; a search result -> a call of the first
    tool it references (with `{}` as input); another tool's result -> a closing text (end_turn).
    """

    def respond(body: Any) -> Reply:
        last = body["messages"][-1]
        content = last["content"]
        if isinstance(content, str) or not any(b.get("type") == "tool_result" for b in content):
            call = {"type": "tool_use", "id": "toolu_search_1", "name": search_tool,
                    "input": {"query": query}}  # fmt: skip
            return Reply(body=anthropic_reply([call]))
        result = next(b for b in content if b["type"] == "tool_result")
        inner = result.get("content")
        if isinstance(inner, list) and inner and inner[0].get("type") == "tool_reference":
            call = {"type": "tool_use", "id": "toolu_call_1", "name": inner[0]["tool_name"],
                    "input": {}}  # fmt: skip
            return Reply(body=anthropic_reply([call]))
        return Reply(body=anthropic_reply([{"type": "text", "text": "Done."}], "end_turn"))

    return respond


def openai_response(output: list[dict[str, Any]]) -> Any:
    """A Responses API answer in the real wire format with the given output items."""
    return {
        "id": "resp_01TOOLSEARCH",
        "object": "response",
        "created_at": 1_763_900_000,
        "model": "gpt-5.4",
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {"input_tokens": 200, "output_tokens": 20, "total_tokens": 220,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }  # fmt: skip


def openai_with_tool_search(query: str) -> Responder:
    """Plays a Responses model using client-executed tool search, from the input it is sent:

    a user message -> a `tool_search_call` with `query`; a `tool_search_output` -> a
    `function_call` of the first tool it loaded; a `function_call_output` -> a closing message.
    """

    def respond(body: Any) -> Reply:
        last = body["input"][-1]
        if last.get("type") == "tool_search_output":
            call = {"type": "function_call", "id": "fc_1", "call_id": "call_fn_1",
                    "name": last["tools"][0]["name"], "arguments": "{}", "status": "completed"}  # fmt: skip
            return Reply(body=openai_response([call]))
        if last.get("type") == "function_call_output":
            text = {"type": "output_text", "text": "Done.", "annotations": []}
            message = {"type": "message", "id": "msg_1", "role": "assistant",
                       "status": "completed", "content": [text]}  # fmt: skip
            return Reply(body=openai_response([message]))
        search = {"type": "tool_search_call", "id": "tsc_1", "call_id": "call_search_1",
                  "execution": "client", "status": "completed", "arguments": {"query": query}}  # fmt: skip
        return Reply(body=openai_response([search]))

    return respond
