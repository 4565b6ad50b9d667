"""Neo4j faults: unreachable at start and lost while serving, through a relay to the session's
Neo4j that a test cuts; killed mid-write and hung (SIGSTOP), on a real server of this module's
own that it kills, restarts and pauses on purpose."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import neo4j
import pytest
from aiohttp.test_utils import TestClient

from tests.neo4j_server import Neo4jServer, start_local, stop_local
from tests.partition import Partition
from tests.services import service_of
from toolselect.api.app import create_app_from_settings
from toolselect.api.http import TENANTS
from toolselect.config import Settings
from toolselect.errors import StoreUnavailable
from toolselect.keys import TENANT_HEADER
from toolselect.records import Turn
from toolselect.service.reachability import READY_PING_S
from toolselect.service.root import Service
from toolselect.store.neo4j.connect import connect_neo4j
from toolselect.store.port import lookup_one
from toolselect.store.spool import Spool

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]
CATALOG = {
    "tools": [
        {"name": "get_weather", "description": "Current weather and forecast for a city."},
        {"name": "send_email", "description": "Send an email message to a recipient."},
        {"name": "crypto_price", "description": "Current price of a cryptocurrency like bitcoin."},
        {"name": "shell_exec", "description": "Run a shell command on the host."},
    ]
}

pytestmark = pytest.mark.neo4j


class PrivateNeo4j:
    """A Neo4j of this module alone, on a fixed port, that tests may stop and restart."""

    auth = None
    database = "neo4j"

    def __init__(self) -> None:
        self.instance = Path(tempfile.mkdtemp(prefix="toolselect-fault-neo4j-"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.uri = f"bolt://127.0.0.1:{self.port}"
        self.running = False

    def start(self) -> None:
        start_local(self.instance, port=self.port)
        self.running = True

    def stop(self, *, kill: bool = False) -> None:
        stop_local(self.instance, keep_data=True, kill=kill)
        self.running = False

    def remove(self) -> None:
        stop_local(self.instance)


@pytest.fixture(scope="module")
def private_neo4j() -> Iterator[PrivateNeo4j]:
    """The module's own server (not started yet); everything it left is removed afterwards."""
    server = PrivateNeo4j()
    try:
        yield server
    finally:
        server.remove()


def settings_for(uri: str, tmp_path: Path, credentials: Neo4jServer | None = None) -> Settings:
    """A server's settings on the Neo4j at `uri` (signing in as `credentials` says, if given)."""
    settings = Settings(
        store="neo4j",
        neo4j_uri=uri,
        embedder="hashing",
        data_dir=str(tmp_path),
        poll_interval_s=0.2,
        shutdown_timeout_s=2.0,
    )
    if credentials is None:
        return settings
    return settings.override(
        neo4j_username=credentials.username,
        neo4j_password=credentials.password,
        neo4j_database=credentials.database,
    )


async def eventually(check: Callable[[], Awaitable[bool]], within: float) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.2)


async def serving_catalog(
    settings: Settings, aiohttp_client: ClientFactory, **overrides: Any
) -> tuple[TestClient[Any, Any], Service]:
    """A server on `settings` (with `overrides`) holding `CATALOG`, ready: its client and its
    service."""
    client = await aiohttp_client(create_app_from_settings(replace(settings, **overrides)))
    await eventually(readiness(client), within=60)
    assert (await client.put("/v1/tools", json=CATALOG)).status == 200
    return client, service_of(client)


async def paused_catalog(
    server: PrivateNeo4j, tmp_path: Path, aiohttp_client: ClientFactory, **overrides: Any
) -> tuple[TestClient[Any, Any], Service, int]:
    """`serving_catalog` on `server` (started if it is not), and its Neo4j process id (to
    pause it with SIGSTOP)."""
    if not server.running:
        await asyncio.to_thread(server.start)
    settings = settings_for(server.uri, tmp_path)
    client, service = await serving_catalog(settings, aiohttp_client, **overrides)
    pid = int((server.instance / "neo4j.pid").read_text().strip())
    return client, service, pid


def readiness(client: TestClient[Any, Any]) -> Callable[[], Awaitable[bool]]:
    async def is_ready() -> bool:
        return (await client.get("/readyz")).status == 200

    return is_ready


async def count(server: PrivateNeo4j | Neo4jServer, label: str) -> int:
    async with neo4j.AsyncGraphDatabase.driver(server.uri, auth=server.auth) as driver:
        records, _, _ = await driver.execute_query(
            f"MATCH (n:{label}) RETURN count(n) AS n",  # label is a constant of this test
            database_=server.database,
        )
        return int(records[0]["n"])


async def test_turns_queued_before_the_store_ever_answered_are_spooled_at_shutdown(
    private_neo4j: PrivateNeo4j, tmp_path: Path, aiohttp_client: ClientFactory
) -> None:
    """A server started while Neo4j is down and stopped before it ever connected keeps the
    turns it acknowledged (202, queued): they wait in the spool for the next start, where the
    queue that no worker took them from lost them all."""
    assert not private_neo4j.running
    settings = settings_for(private_neo4j.uri, tmp_path)
    client = await aiohttp_client(create_app_from_settings(settings))
    turns = [{"request": f"weather in city {i}", "used_tool": "get_weather",
              "turn_id": f"never-{i}", "outcome": "ok"} for i in range(12)]  # fmt: skip
    observed = await client.post("/v1/observe/batch", json={"turns": turns})
    assert (await observed.json()) == {"queued": 12, "dropped": 0}
    started = time.monotonic()
    await client.close()
    assert time.monotonic() - started < settings.shutdown_timeout_s + 1
    spool = Spool.open(settings.spool_path, max_bytes=settings.spool_max_bytes)
    try:
        kept = [entry.record for entry in spool.head(100)]
    finally:
        spool.close()
    assert sorted(t.id for t in kept if isinstance(t, Turn)) == sorted(t["turn_id"] for t in turns)
    assert all(isinstance(t, Turn) and t.used_tool == "get_weather" for t in kept)


async def test_unreachable_at_start_then_ready(
    relay: Partition, neo4j_server: Neo4jServer, tmp_path: Path, aiohttp_client: ClientFactory
) -> None:
    """With Neo4j down the server starts, /readyz is 503 with the reason, ranking is 503
    not_ready (a label too), observe still answers 202; once Neo4j comes up the service becomes ready and
    the turns observed meanwhile reach the store."""
    await relay.cut()
    settings = settings_for(relay.uri, tmp_path, neo4j_server)
    client = await aiohttp_client(create_app_from_settings(settings))
    service = service_of(client)
    ready = await client.get("/readyz")
    assert ready.status == 503
    error = (await ready.json())["error"]
    assert error["code"] == "not_ready" and relay.uri in error["message"]
    rank = await client.post("/v1/rank", json={"query": "weather"})
    assert rank.status == 503 and (await rank.json())["error"]["code"] == "not_ready"
    # A label for a tool the store holds: not a 404 (which a client would not retry).
    label = await client.post("/v1/exemplars", json={"query": "rain?", "tool": "get_weather"})
    assert label.status == 503 and (await label.json())["error"]["code"] == "not_ready"
    observed = await client.post(
        "/v1/observe", json={"request": "hello", "used_tool": "shell_exec", "turn_id": "early"}
    )
    assert observed.status == 202 and (await observed.json())["queued"] is True
    assert (await client.get("/healthz")).status == 200

    await relay.heal()
    await eventually(readiness(client), within=90)
    assert (await client.put("/v1/tools", json=CATALOG)).status == 200
    rank = await client.post("/v1/rank", json={"query": "weather in Turin", "k": 1})
    assert (await rank.json())["results"][0]["tool"] == "get_weather"

    async def early_turn_stored() -> bool:
        return await service.store.get_turn("early") is not None

    await eventually(early_turn_stored, within=30)


async def test_lost_while_serving_keeps_ranking_and_loses_no_label(
    relay: Partition, neo4j_server: Neo4jServer, tmp_path: Path, aiohttp_client: ClientFactory
) -> None:
    """Neo4j lost under a serving replica: ranking answers from memory, turns and labels
    wait in the backlog (a human label is still accepted), and all of it is written when
    Neo4j returns."""
    # Ready first: a ranking before the catalog loads is a 503, not the answer to compare.
    settings = settings_for(relay.uri, tmp_path, neo4j_server)
    client, service = await serving_catalog(settings, aiohttp_client)
    before = await (await client.post("/v1/rank", json={"query": "weather", "k": 3})).json()

    await relay.cut()

    after = await (await client.post("/v1/rank", json={"query": "weather", "k": 3})).json()
    assert after["results"] == before["results"]
    turns = [
        {"request": f"send an email message to person {i}", "used_tool": "shell_exec",
         "turn_id": f"down-{i}"}
        for i in range(20)
    ]  # fmt: skip
    resp = await client.post("/v1/observe/batch", json={"turns": turns})
    assert (await resp.json()) == {"queued": 20, "dropped": 0}
    feedback = await client.post(
        "/v1/exemplars", json={"query": "il prezzo di BTC ora", "tool": "crypto_price"}
    )
    assert feedback.status == 201
    assert await service.learner.drain(30.0)
    assert service.store.backlog >= 21
    rank = await client.post("/v1/rank", json={"query": "il prezzo di BTC ora", "k": 1})
    assert (await rank.json())["results"][0]["tool"] == "crypto_price"
    ready = await client.get("/readyz")
    assert ready.status == 503
    metrics = await (await client.get("/metrics")).text()
    assert 'toolselect_store_backlog{tenant="default"} ' in metrics

    async def store_up(up: float) -> bool:
        return service.metrics.value("toolselect_store_up", {}) == up

    await eventually(lambda: store_up(0.0), within=30)  # seen by the poll, traffic or not

    await relay.heal()

    async def flushed() -> bool:
        return service.store.backlog == 0

    await eventually(flushed, within=90)
    await eventually(lambda: store_up(1.0), within=30)
    assert await count(neo4j_server, "Turn") >= 20
    for i in range(20):
        turn = await service.store.get_turn(f"down-{i}")
        assert turn is not None and turn.label == "send_email"
    label = await lookup_one(service.store, "il prezzo di BTC ora")
    assert label is not None and label.tier == "feedback" and label.tool == "crypto_price"
    assert (await client.get("/readyz")).status == 200


async def test_killed_mid_write_keeps_whole_transactions(private_neo4j: PrivateNeo4j) -> None:
    """SIGKILL while 20,000 turns are being written: after restart Neo4j holds whole batches
    (multiples of the 2,000-turn transaction), never a part of one."""
    if not private_neo4j.running:
        await asyncio.to_thread(private_neo4j.start)
    async with neo4j.AsyncGraphDatabase.driver(private_neo4j.uri) as driver:
        await driver.execute_query("MATCH (t:Turn) DETACH DELETE t", database_="neo4j")
    # Opened as a service opens it: with its driver's bounds the write fails within seconds of
    # the kill, where a driver's default retried it for 30 s (30 to 66 s on a busy machine).
    store = await connect_neo4j(private_neo4j.uri, "", "", "neo4j")
    try:
        await store.migrate()
        now = time.time()
        turns = [
            Turn(id=f"k{i}", request=f"request {i}", used_tool="shell_exec",
                 at=datetime.fromtimestamp(now, UTC))
            for i in range(20_000)
        ]  # fmt: skip
        writing = asyncio.create_task(store.record_turns(turns))

        async def some_written() -> bool:
            async with neo4j.AsyncGraphDatabase.driver(private_neo4j.uri) as probe:
                records, _, _ = await probe.execute_query(
                    "MATCH (t:Turn) RETURN count(t) AS n", database_="neo4j"
                )
                return int(records[0]["n"]) > 0

        await eventually(some_written, within=60)
        await asyncio.to_thread(private_neo4j.stop, kill=True)
        with pytest.raises(StoreUnavailable):  # the write dies with its server
            await writing
    finally:
        await store.close()
    await asyncio.to_thread(private_neo4j.start)
    stored = await count(private_neo4j, "Turn")
    assert stored > 0 and stored % 2000 == 0, stored


async def test_a_hung_store_is_not_ready_in_time_and_its_turns_spool(
    private_neo4j: PrivateNeo4j, tmp_path: Path, aiohttp_client: ClientFactory
) -> None:
    """A Neo4j that stops answering with its sockets open (SIGSTOP, as a frozen VM or a
    partition that drops packets looks): /readyz answers 503 within its bound instead of
    holding the probe, and at once while it is known down; the turns observed meanwhile go to the spool once the write
    deadline passes instead of holding intake; once Neo4j resumes, the same replica is ready
    and every turn is in the store."""
    client, service, pid = await paused_catalog(
        private_neo4j, tmp_path, aiohttp_client, store_write_timeout_s=3.0
    )
    is_ready = readiness(client)
    os.kill(pid, signal.SIGSTOP)
    try:
        ready = await asyncio.wait_for(client.get("/readyz"), READY_PING_S + 5)
        if ready.status == 200:  # joined a ping the store answered just before it stopped
            ready = await asyncio.wait_for(client.get("/readyz"), READY_PING_S + 5)
        assert ready.status == 503
        error = (await ready.json())["error"]
        # The bound's own message, or the driver's when it gives up on the socket first.
        assert error["code"] == "not_ready" and "store unreachable" in error["message"]
        # The store is known down now: the next probes are answered from that at once, where
        # each waited out the bound again on the hung store.
        for _ in range(3):
            started = time.monotonic()
            assert (await client.get("/readyz")).status == 503
            assert time.monotonic() - started < 0.5
        turns = [{"request": f"weather in city {i}", "used_tool": "get_weather",
                  "turn_id": f"hung-{i}", "outcome": "ok"} for i in range(5)]  # fmt: skip
        observed = await client.post("/v1/observe/batch", json={"turns": turns})
        assert observed.status == 202
        # A tenant whose service is not running yet starts not ready instead of holding the
        # request on the hung store (it took the whole request timeout: 503).
        started = time.monotonic()
        team = await client.post(
            "/v1/observe",
            json={"request": "weather in Oslo", "used_tool": "get_weather", "turn_id": "team-1"},
            headers={TENANT_HEADER: "team-h"},
        )
        assert team.status == 202 and (await team.json())["queued"] is True
        assert time.monotonic() - started < READY_PING_S + 3

        async def spooled() -> bool:
            return service.store.spool.depth["turn"] == len(turns)

        await eventually(spooled, within=30)
        assert service.learner.depth == 0  # intake goes on while the store hangs

        async def store_down() -> bool:  # the poll is bounded: it held the upkeep, up at 1
            return service.metrics.value("toolselect_store_up", {}) == 0.0

        await eventually(store_down, within=service.settings.poll_interval_s + READY_PING_S + 10)
    finally:
        os.kill(pid, signal.SIGCONT)
    await eventually(is_ready, within=60)

    async def all_stored() -> bool:
        # A Neo4j just resumed (on a loaded machine) may miss the deadline once more: the store
        # is then down again until a flush gets through, and reads fail fast meanwhile.
        try:
            await service.store.flush()
            return all([await service.store.get_turn(t["turn_id"]) is not None for t in turns])
        except StoreUnavailable:
            return False

    await eventually(all_stored, within=60)
    team_service = await client.app[TENANTS].get("team-h")

    async def team_stored() -> bool:
        return await team_service.store.get_turn("team-1") is not None

    await eventually(team_stored, within=60)


async def test_a_write_the_shutdown_cuts_short_keeps_its_turns(
    private_neo4j: PrivateNeo4j, tmp_path: Path, aiohttp_client: ClientFactory
) -> None:
    """SIGTERM while a batch's write waits on a Neo4j that hangs past the shutdown timeout: the
    close cancels that write, and its turns go to the spool with the queue instead of being
    lost with the cancelled task; the close keeps to its timeout."""
    client, service, pid = await paused_catalog(
        private_neo4j, tmp_path, aiohttp_client, shutdown_timeout_s=1.0, store_write_timeout_s=60.0
    )
    os.kill(pid, signal.SIGSTOP)
    try:
        turns = [{"request": f"mail person {i}", "used_tool": "send_email",
                  "turn_id": f"cut-{i}", "outcome": "ok"} for i in range(5)]  # fmt: skip
        observed = await client.post("/v1/observe/batch", json={"turns": turns})
        assert (await observed.json()) == {"queued": 5, "dropped": 0}

        async def writing() -> bool:  # taken from the queue, its write waiting on Neo4j
            return service.learner.depth == 0 and service.learner.stats.in_progress == 1

        await eventually(writing, within=10)
        started = time.monotonic()
        await client.close()
        assert time.monotonic() - started < service.settings.shutdown_timeout_s + 3
    finally:
        os.kill(pid, signal.SIGCONT)
    spool = Spool.open(service.settings.spool_path, max_bytes=service.settings.spool_max_bytes)
    try:
        kept = sorted(e.record.id for e in spool.head(100) if isinstance(e.record, Turn))
    finally:
        spool.close()
    assert kept == sorted(t["turn_id"] for t in turns)
