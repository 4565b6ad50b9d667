"""Integration fixtures: the real toolselect server on its own thread, or the real app on each
store (SQLite, then Neo4j) on the test's loop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.client.conftest import Served, serve
from tests.live import LiveServer, live_server
from tests.services import ClientFactory, ServiceFactory


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    """A toolselect server with the hand-made catalog and no API keys."""
    yield from live_server(tmp_path)


@pytest_asyncio.fixture(loop_scope="function")
async def served(services: ServiceFactory, aiohttp_client: ClientFactory) -> Served:
    """The app on a fresh store (SQLite, then the real Neo4j) with the hand-made catalog."""
    return await serve(services, aiohttp_client)
