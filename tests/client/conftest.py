"""Client fixtures: a real server on its own thread (open, and one that requires a key), and the
real app on each store (SQLite, then Neo4j) on a real socket of the test's own loop."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from tests.api.conftest import HAND_CATALOG
from tests.live import LiveServer, live_server
from tests.services import ClientFactory, ServiceFactory
from toolselect.records import Turn
from toolselect.service import Service

API_KEY = "k-test-0123456789"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    """A toolselect server with the hand-made catalog and no API keys."""
    yield from live_server(tmp_path)


@pytest.fixture
def keyed_server(tmp_path: Path) -> Iterator[LiveServer]:
    """A toolselect server that answers `/v1/*` only with `Authorization: Bearer API_KEY`."""
    yield from live_server(tmp_path, api_keys=(API_KEY,))


@dataclass(frozen=True)
class Served:
    """The HTTP app on one store, reachable at `url`, and the service behind it."""

    url: str
    service: Service

    async def turn(self, turn_id: str, timeout_s: float = 15.0) -> Turn:
        """The turn once the learner has worked through its queue and stored it."""
        turn = await self.service.learning.turn_when_done(turn_id, timeout_s)
        assert turn is not None, f"turn {turn_id!r} not stored within {timeout_s}s"
        return turn


async def serve(services: ServiceFactory, aiohttp_client: ClientFactory) -> Served:
    """The app on the `services` store holding the hand-made catalog (pack `assistant`); only
    async clients can reach it (it runs on the test's loop)."""
    client, service = await services.serve(aiohttp_client)
    await service.catalog.upsert_tools(HAND_CATALOG, pack="assistant")
    return Served(str(client.make_url("")).rstrip("/"), service)


@pytest_asyncio.fixture(loop_scope="function")
async def served(services: ServiceFactory, aiohttp_client: ClientFactory) -> Served:
    """The app on a fresh store (SQLite, then the real Neo4j) with the hand-made catalog."""
    return await serve(services, aiohttp_client)
