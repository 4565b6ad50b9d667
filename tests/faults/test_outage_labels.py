"""Human labels a replica spooled while cut off from Neo4j, and what other replicas did to their
query or tool before it replayed them: two services on the session Neo4j, one of them behind a
relay the test cuts (a partition), over HTTP."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient

from tests.neo4j_server import Neo4jServer
from tests.partition import Partition
from tests.services import ClientFactory, ServiceFactory
from toolselect.api.app import create_app
from toolselect.names import normalise_query
from toolselect.service import Service
from toolselect.store.port import lookup_one

CATALOG = {
    "tools": [
        {"name": "get_weather", "description": "Current weather and forecast for a city."},
        {"name": "send_email", "description": "Send an email message to a recipient."},
        {"name": "crypto_price", "description": "Current price of a cryptocurrency like bitcoin."},
    ]
}
QUERY = "il prezzo di BTC ora"

pytestmark = [pytest.mark.neo4j, pytest.mark.slow]


@dataclass
class Replicas:
    """`a` reaches Neo4j through `partition`, `b` directly."""

    a: Service
    a_http: TestClient[Any, Any]
    b: Service
    b_http: TestClient[Any, Any]
    partition: Partition


@pytest_asyncio.fixture(loop_scope="function")
async def replicas(
    relay: Partition, neo4j_server: Neo4jServer, tmp_path: Path, aiohttp_client: ClientFactory
) -> AsyncIterator[Replicas]:
    """Two ready replicas on the wiped session Neo4j (`a` through `relay`), each with a data
    folder (spool) of its own, both holding `CATALOG`."""
    factory = ServiceFactory("neo4j", tmp_path, neo4j_server)
    try:
        b = await factory.start(wait_for_store=True, data_dir=str(tmp_path / "b"))
        b_http = await aiohttp_client(create_app(b))
        assert (await b_http.put("/v1/tools", json=CATALOG)).status == 200
        a = await factory.start(
            wait_for_store=True,
            data_dir=str(tmp_path / "a"),
            neo4j_uri=relay.uri,
            store_write_timeout_s=1.0,
        )
        a_http = await aiohttp_client(create_app(a))
        assert a.ranker.has("crypto_price")
        yield Replicas(a, a_http, b, b_http, relay)
    finally:
        await factory.aclose()


async def eventually(check: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"{what}: not reached within {within}s"
        await asyncio.sleep(0.1)


async def spool_a_human_label(r: Replicas, tool: str) -> None:
    """Cut `a` off and label `QUERY` with `tool` there: spooled, and folded into its ranker."""
    await r.partition.cut()
    answer = await r.a_http.post("/v1/exemplars", json={"query": QUERY, "tool": tool})
    assert answer.status == 201, await answer.text()
    assert r.a.store.backlog == 1
    assert r.a.ranker.holds(normalise_query(QUERY), tool, "trusted")


async def heal_and_replay(r: Replicas) -> None:
    await r.partition.heal()
    await eventually(
        lambda: not r.a.store.backlog and not r.a.store.down, within=30, what="a's replay"
    )


async def test_a_label_the_replay_drops_for_a_deleted_tool_stops_counting(
    replicas: Replicas,
) -> None:
    """A human label spooled on a cut-off replica whose tool another replica deletes before the
    replay: the replay drops it, and the cut-off replica's ranker lets it go too, so the tool
    put back starts without labels there as everywhere else."""
    r = replicas
    await spool_a_human_label(r, "crypto_price")
    assert (await r.b_http.delete("/v1/tools/crypto_price")).status == 200

    await heal_and_replay(r)
    assert await lookup_one(r.b.store, QUERY) is None
    assert (await r.b_http.put("/v1/tools", json=CATALOG)).status == 200  # put back
    await eventually(lambda: r.a.ranker.has("crypto_price"), within=10, what="a's reload")
    await eventually(
        lambda: not r.a.ranker.holds(normalise_query(QUERY), "crypto_price", "trusted"),
        within=5,
        what="the dropped label unfolded",
    )
    assert r.a.ranker.exemplar_count("crypto_price") == 0
    assert r.b.ranker.exemplar_count("crypto_price") == 0


async def test_a_later_human_label_on_another_replica_is_not_overwritten_by_the_replay(
    replicas: Replicas,
) -> None:
    """A human label spooled on a cut-off replica, then another human label for the same
    request on a replica that reaches the store: the replay leaves the later one stored, and
    the cut-off replica's ranker takes it in place of its own."""
    r = replicas
    await spool_a_human_label(r, "crypto_price")
    later = await r.b_http.post("/v1/exemplars", json={"query": QUERY, "tool": "get_weather"})
    assert later.status == 201

    await heal_and_replay(r)
    stored = await lookup_one(r.b.store, QUERY)
    assert stored is not None and stored.tool == "get_weather"
    await eventually(
        lambda: r.a.ranker.holds(normalise_query(QUERY), "get_weather", "trusted"),
        within=5,
        what="the stored label folded on a",
    )
