"""A scripted local HTTP stub standing in for a teacher provider, and oracle test helpers.

The stub is a real aiohttp server on 127.0.0.1: the real SDK / HTTP client talks to it over
TCP, and each test scripts the answers (status, JSON, headers, hangs) in order.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer

from toolselect.graph.store import OracleCall
from toolselect.metrics import Metrics
from toolselect.oracle.base import Candidate

CANDIDATES = (
    Candidate("whatsapp__send_message", "Send a WhatsApp message to a contact."),
    Candidate("email__send_email", "Send an email."),
    Candidate("web_search", "Search the web."),
)
CANDIDATE_NAMES = [c.name for c in CANDIDATES]
REQUEST = "tell Ana on whatsapp that I'm running late"
USED = "mcp__shell_exec"


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a status with a body (JSON or raw text), headers, or a hang."""

    status: int = 200
    body: Any = None
    text: str | None = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


class Stub:
    """Serves `script` in order (the last reply repeats) and records every request received."""

    def __init__(self, path: str) -> None:
        self.path = path
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
        if not self.script:
            return web.json_response({"error": "unscripted"}, status=599)
        reply = self.script.pop(0) if len(self.script) > 1 else self.script[0]
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
        return web.json_response(reply.body, status=reply.status, headers=reply.headers)

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


@pytest_asyncio.fixture(loop_scope="function")
async def anthropic_stub() -> AsyncIterator[Stub]:
    """A local stand-in for `POST /v1/messages`."""
    async for stub in start_stub("/v1/messages"):
        yield stub


@pytest_asyncio.fixture(loop_scope="function")
async def openai_stub() -> AsyncIterator[Stub]:
    """A local stand-in for `POST /v1/chat/completions`."""
    async for stub in start_stub("/v1/chat/completions"):
        yield stub


class FakeClock:
    """Seconds that only move when the test says so."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Sleeps:
    """An injected `sleep` that records the delays asked for and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


class Calls:
    """An injected `record_call` that keeps every traced attempt."""

    def __init__(self) -> None:
        self.calls: list[OracleCall] = []

    async def __call__(self, call: OracleCall) -> None:
        self.calls.append(call)

    @property
    def results(self) -> list[str]:
        return [c.result for c in self.calls]


def sample(metrics: Metrics, counter: str, **labels: str) -> float:
    """The current value of a toolselect counter (0 when never incremented)."""
    value = metrics.registry.get_sample_value(f"toolselect_{counter}_total", labels)
    return value or 0.0
