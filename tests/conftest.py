"""Shared fixtures: the real Neo4j server for the session and per-test clean stores."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from tests.neo4j_server import Neo4jServer, resolve
from tests.stubs import Stub, start_stub


@pytest.fixture(scope="session")
def neo4j_server() -> Iterator[Neo4jServer]:
    """A real Neo4j reachable over Bolt; skipped (or failed under TOOLSELECT_REQUIRE_NEO4J=1)."""
    server, reason = resolve()
    if server is None:
        if os.environ.get("TOOLSELECT_REQUIRE_NEO4J") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield server
    finally:
        server.stop()


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
