"""A service started while Neo4j is down ranks from the catalog snapshot its predecessor left
in the data folder: the session's Neo4j, reached through a relay a test cuts and heals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.api.conftest import HAND_CATALOG
from tests.api.conversation import WEATHER, WEATHER_COMPANION, pin
from tests.faults.test_neo4j_faults import CATALOG, ClientFactory, eventually, settings_for
from tests.neo4j_server import Neo4jServer
from tests.partition import Partition
from tests.services import free_port, service_of
from toolselect.api.app import create_app_from_settings
from toolselect.config import Settings
from toolselect.learn.session_fit import SessionWeights
from toolselect.records import Tool
from toolselect.service.snapshot import SNAPSHOT_FILE, CatalogSnapshot, write_snapshot
from toolselect.store.factory import open_store

QUERIES = ("weather in Turin tomorrow", "il prezzo di BTC ora", "mail my landlord")


async def rankings(client: Any) -> list[list[tuple[str, float]]]:
    """Each query's top 3 as (tool, score), once the tuner has refitted to the labels held."""
    await service_of(client).tuner.settle()
    out = []
    for query in QUERIES:
        resp = await client.post("/v1/rank", json={"query": query, "k": 3})
        assert resp.status == 200
        out.append([(r["tool"], r["score"]) for r in (await resp.json())["results"]])
    return out


@pytest.mark.neo4j
async def test_a_start_in_an_outage_ranks_from_the_snapshot_until_the_store_answers(
    relay: Partition, neo4j_server: Neo4jServer, tmp_path: Path, aiohttp_client: ClientFactory
) -> None:
    """A replica ranks a catalog with labels and stops; Neo4j stops; a new replica over the
    same data folder is ready and ranks the same top-k with the same scores, spools the turns
    it observes, refuses a catalog write with 503 `store_unavailable`; once Neo4j is back it
    leaves snapshot mode, takes the catalog another writer changed meanwhile and stores the
    turns."""
    settings = settings_for(relay.uri, tmp_path, neo4j_server)
    first = await aiohttp_client(create_app_from_settings(settings))

    async def loaded() -> bool:
        return (await first.get("/readyz")).status == 200

    await eventually(loaded, within=60)
    assert (await first.put("/v1/tools", json=CATALOG)).status == 200
    for query, tool in (
        ("il prezzo di BTC ora", "crypto_price"),
        ("mail my landlord", "shell_exec"),
    ):
        resp = await first.post("/v1/exemplars", json={"query": query, "tool": tool})
        assert resp.status == 201
    before = await rankings(first)
    assert before[1][0][0] == "crypto_price" and before[2][0][0] == "shell_exec"
    await first.close()
    assert (tmp_path / SNAPSHOT_FILE).exists()

    await relay.cut()
    client = await aiohttp_client(create_app_from_settings(settings))
    service = service_of(client)
    ready = await client.get("/readyz")
    assert ready.status == 200 and (await ready.json())["snapshot"] is True
    assert service.metrics.value("toolselect_serving_from_snapshot") == 1.0
    after = await rankings(client)
    assert [[t for t, _ in top] for top in after] == [[t for t, _ in top] for top in before]
    for got, want in zip(after, before, strict=True):
        assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)
    turns = [{"request": f"weather in city {i}", "used_tool": "get_weather",
              "turn_id": f"offline-{i}", "outcome": "ok"} for i in range(5)]  # fmt: skip
    observed = await client.post("/v1/observe/batch", json={"turns": turns})
    assert (await observed.json()) == {"queued": 5, "dropped": 0}
    write = await client.put("/v1/tools", json=CATALOG)
    assert write.status == 503 and (await write.json())["error"]["code"] == "store_unavailable"

    # Another replica's write, straight to the store, while this one is cut off.
    other = await open_store(settings.override(neo4j_uri=neo4j_server.uri))
    try:
        added = Tool("translate_text", "Translate a text into another language, e.g. French.")
        await other.upsert_tools([added])
    finally:
        await other.close()
    await relay.heal()

    async def from_store() -> bool:
        ready = await client.get("/readyz")
        return ready.status == 200 and "snapshot" not in await ready.json()

    await eventually(from_store, within=90)
    assert service.metrics.value("toolselect_serving_from_snapshot") == 0.0

    async def picked_up() -> bool:
        rank = await client.post("/v1/rank", json={"query": "translate this into French"})
        top: str = (await rank.json())["results"][0]["tool"]
        return top == "translate_text"

    await eventually(picked_up, within=30)

    async def stored() -> bool:
        found = [await service.store.get_turn(t["turn_id"]) for t in turns]
        return all(turn is not None for turn in found)

    await eventually(stored, within=30)


# A session's ranking after a send_email turn: the session prior puts create_calendar_event
# (which followed send_email) first, and get_weather, second, has web_search for companion.
EARLIER = {"request": "mail Marco the agenda", "used_tool": "send_email", "session_id": "s-1"}
ASKED = {"query": WEATHER, "k": 2, "companions": 2, "session_id": "s-1"}


async def in_session(client: Any) -> tuple[list[tuple[str, float]], list[dict[str, Any]]]:
    """`ASKED`'s top k (tool, score) and companions once the session's turn is noted."""
    assert (await client.post("/v1/observe", json=EARLIER)).status == 202
    resp = await client.post("/v1/rank", json=ASKED)
    assert resp.status == 200
    answer = await resp.json()
    return [(r["tool"], r["score"]) for r in answer["results"]], answer["companions"]


@pytest.mark.neo4j
async def test_a_start_in_an_outage_ranks_with_the_conversation_signals_of_the_snapshot(
    relay: Partition, neo4j_server: Neo4jServer, tmp_path: Path, aiohttp_client: ClientFactory
) -> None:
    """A replica that ranked with relations and a session fit (pinned) leaves them in its
    snapshot: a replica started over the same data folder while Neo4j is down ranks a
    session's request as it did (the same companion, the prior ranking the same top), until
    its first session refresh from the store replaces them with the store's (no companion)."""
    settings = settings_for(relay.uri, tmp_path, neo4j_server)
    first = await aiohttp_client(create_app_from_settings(settings))

    async def loaded() -> bool:
        return (await first.get("/readyz")).status == 200

    await eventually(loaded, within=60)
    tools = [{"name": t.name, "description": t.description} for t in HAND_CATALOG]
    assert (await first.put("/v1/tools", json={"tools": tools})).status == 200
    await pin(service_of(first), SessionWeights(prior=1.0, companion_share=0.5))
    ranked, companions = await in_session(first)
    assert [t for t, _ in ranked] == ["create_calendar_event", "get_weather"]
    assert companions == [WEATHER_COMPANION]
    await first.close()

    await relay.cut()
    client = await aiohttp_client(create_app_from_settings(settings))
    assert (await client.get("/readyz")).status == 200
    ranked_after, companions_after = await in_session(client)
    assert companions_after == companions
    assert [t for t, _ in ranked_after] == [t for t, _ in ranked]
    assert [s for _, s in ranked_after] == pytest.approx([s for _, s in ranked], abs=1e-6)

    await relay.heal()  # the store has no fit (two turns): its first refresh offers none

    async def refreshed() -> bool:
        resp = await client.post("/v1/rank", json=ASKED)
        return bool((await resp.json()).get("companions") == [])

    await eventually(refreshed, within=90)


def unreachable(tmp_path: Path) -> Settings:
    """Settings of a Neo4j nobody listens on (a closed port)."""
    return settings_for(f"bolt://127.0.0.1:{free_port()}", tmp_path)


@pytest.mark.slow  # waits seconds: kept out of `make test-fast`
@pytest.mark.parametrize("kind", ["corrupt", "other embedder"])
async def test_a_snapshot_it_cannot_use_is_ignored_with_one_warning(
    kind: str, tmp_path: Path, aiohttp_client: ClientFactory
) -> None:
    """A corrupt snapshot, or one made with another embedder, is no snapshot: the start logs
    one warning and is not ready (503 `not_ready`), as without one."""
    path = tmp_path / SNAPSHOT_FILE
    if kind == "corrupt":
        path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    else:
        tool = Tool("get_weather", "Current weather and forecast for a city.")
        write_snapshot(path, CatalogSnapshot("minilm-other", 3, 1, (tool,), ()))
    with capture_logs() as logs:
        client = await aiohttp_client(create_app_from_settings(unreachable(tmp_path)))
    assert [e["event"] for e in logs].count("catalog_snapshot_ignored") == 1
    ready = await client.get("/readyz")
    assert ready.status == 503 and (await ready.json())["error"]["code"] == "not_ready"
    rank = await client.post("/v1/rank", json={"query": "weather"})
    assert rank.status == 503 and (await rank.json())["error"]["code"] == "not_ready"
    assert service_of(client).metrics.value("toolselect_serving_from_snapshot") in (None, 0.0)


async def test_the_sqlite_store_keeps_no_snapshot(
    tmp_path: Path, aiohttp_client: ClientFactory
) -> None:
    """The SQLite store is a local file itself: no snapshot is written beside it."""
    settings = Settings(embedder="hashing", data_dir=str(tmp_path), poll_interval_s=0.2)
    client = await aiohttp_client(create_app_from_settings(settings))
    assert (await client.put("/v1/tools", json=CATALOG)).status == 200
    assert (await client.post("/v1/rank", json={"query": "weather"})).status == 200
    await client.close()
    assert not (tmp_path / SNAPSHOT_FILE).exists()
