"""Shared fixtures: the real Neo4j server for the session and per-test clean stores."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from hypothesis import settings

from tests.neo4j_server import NEO4J, Neo4jServer, resolve
from tests.services import ServiceFactory, wipe
from tests.stubs import Stub, start_stub

# No per-example deadline: speed is measured in bench/, and on a busy machine the first example
# of a property (imports, warm-up) overran Hypothesis' 200 ms default and failed a correct test.
settings.register_profile("toolselect", deadline=None)
settings.load_profile("toolselect")


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `neo4j` every test that asks for `neo4j_server` itself (a fixture parametrised over
    stores marks its Neo4j parameter: `NEO4J`; a module with a private server marks itself)."""
    for item in items:
        if "neo4j_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.neo4j)


@pytest_asyncio.fixture(params=["sqlite", NEO4J], loop_scope="function")
async def services(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ServiceFactory]:
    """A factory of services on one store kind; the Neo4j database is wiped first."""
    server: Neo4jServer | None = None
    if request.param == "neo4j":
        server = request.getfixturevalue("neo4j_server")
        await wipe(server)
    factory = ServiceFactory(request.param, tmp_path, server)
    try:
        yield factory
    finally:
        await factory.aclose()
