"""The durable spool with the real parts: a `toolselect serve` process acknowledges labels and
turns while its Neo4j is down (the session's Neo4j behind a relay the test cuts), is SIGKILLed,
restarts with Neo4j still down, and everything it acknowledged reaches Neo4j exactly once when
Neo4j returns."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import neo4j
import pytest

from tests.neo4j_server import Neo4jServer
from tests.partition import Partition
from tests.services import cli_env, free_port

EXE = [sys.executable, "-m", "toolselect.cmd.main"]
CATALOG = {
    "tools": [
        {"name": "get_weather", "description": "Current weather and forecast for a city."},
        {"name": "send_email", "description": "Send an email message to a recipient."},
        {"name": "crypto_price", "description": "Current price of a cryptocurrency like bitcoin."},
        {"name": "shell_exec", "description": "Run a shell command on the host."},
    ]
}
LABELS = [
    ("il prezzo di BTC ora", "crypto_price"),
    ("will it rain in Turin tomorrow", "get_weather"),
    ("mail the invoice to Ada", "send_email"),
    ("list the files in /tmp", "shell_exec"),
    ("how much is one ether", "crypto_price"),
]
TURNS = [f"spooled-{i}" for i in range(6)]

pytestmark = [pytest.mark.neo4j, pytest.mark.slow]


async def eventually(check: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"{what}: not reached within {within}s"
        await asyncio.sleep(0.2)


async def status(session: aiohttp.ClientSession, url: str) -> int:
    try:
        async with session.get(url) as resp:
            return resp.status
    except aiohttp.ClientError:
        return 0


async def spool_depth(session: aiohttp.ClientSession, url: str, kind: str) -> float:
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    found = re.search(
        rf'^toolselect_spool_depth\{{kind="{kind}",tenant="default"\}} (\S+)$', text, re.M
    )
    return float(found.group(1)) if found else 0.0


async def serve(env: dict[str, str], port: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *EXE, "serve", "--port", str(port), env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def copies(server: Neo4jServer) -> tuple[dict[str, int], dict[str, int]]:
    """How many times each test label (by query) and each test turn (by id) is in Neo4j."""
    async with neo4j.AsyncGraphDatabase.driver(server.uri, auth=server.auth) as driver:
        labels, _, _ = await driver.execute_query(
            "MATCH (e:ToolSelectionExample)-[:SELECTS]->(t:Tool) WHERE e.query IN $queries "
            "RETURN e.query AS key, t.name AS tool, e.tier AS tier",
            queries=[q for q, _ in LABELS], database_=server.database,
        )  # fmt: skip
        turns, _, _ = await driver.execute_query(
            "MATCH (t:Turn) WHERE t.id IN $ids RETURN t.id AS key",
            ids=TURNS, database_=server.database,
        )  # fmt: skip
    label_counts: dict[str, int] = {}
    for record in labels:
        assert (record["key"], record["tool"]) in LABELS and record["tier"] == "feedback"
        label_counts[record["key"]] = label_counts.get(record["key"], 0) + 1
    turn_counts: dict[str, int] = {}
    for record in turns:
        turn_counts[record["key"]] = turn_counts.get(record["key"], 0) + 1
    return label_counts, turn_counts


async def readiness(session: aiohttp.ClientSession, url: str) -> tuple[int, bool]:
    """`/readyz`'s status and whether it ranks from the catalog snapshot."""
    async with session.get(url + "/readyz") as resp:
        return resp.status, bool((await resp.json()).get("snapshot"))


async def test_acknowledged_writes_survive_sigkill_during_an_outage(
    relay: Partition, neo4j_server: Neo4jServer, tmp_path: Path
) -> None:
    """Labels (201) and turns (202, then spooled) acknowledged while Neo4j is down survive a
    SIGKILL and a restart with Neo4j still down (which ranks from the catalog snapshot the
    first process kept), and land in Neo4j exactly once after."""
    env = cli_env(
        tmp_path / "unused.db", TOOLSELECT_STORE="neo4j", **neo4j_server.env(),
        TOOLSELECT_DATA_DIR=str(tmp_path / "data"), TOOLSELECT_POLL_INTERVAL="0.2",
        TOOLSELECT_ORACLE="off", TOOLSELECT_SHUTDOWN_TIMEOUT="2",
    ) | {"NEO4J_URI": relay.uri}  # fmt: skip
    catalog = tmp_path / "tools.json"
    catalog.write_text(json.dumps(CATALOG))
    imported = await asyncio.to_thread(
        subprocess.run, [*EXE, "tools", "import", str(catalog)], env=env, capture_output=True
    )
    assert imported.returncode == 0, imported.stderr
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = await serve(env, port)
    try:
        async with aiohttp.ClientSession() as session:

            async def ready() -> bool:
                assert proc.returncode is None, "server exited"
                return await status(session, url + "/readyz") == 200

            await eventually(ready, 90, "first start ready")
            await relay.cut()

            for query, tool in LABELS:
                async with session.post(
                    url + "/v1/exemplars", json={"query": query, "tool": tool}
                ) as resp:
                    assert resp.status == 201, await resp.text()
            batch = [{"request": f"turn number {i}", "used_tool": "shell_exec", "turn_id": t}
                     for i, t in enumerate(TURNS)]  # fmt: skip
            async with session.post(url + "/v1/observe/batch", json={"turns": batch}) as resp:
                assert (await resp.json())["queued"] == len(TURNS)

            async def turns_spooled() -> bool:
                return await spool_depth(session, url, "turn") >= len(TURNS)

            await eventually(turns_spooled, 30, "turns in the spool")
            assert await spool_depth(session, url, "exemplar") == len(LABELS)

            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            proc = await serve(env, port)

            async def alive() -> bool:
                assert proc.returncode is None, "restarted server exited"
                return await status(session, url + "/healthz") == 200

            await eventually(alive, 60, "restart serving")
            # The first process kept its catalog snapshot: the restart ranks from it, ready.
            assert await readiness(session, url) == (200, True)
            with sqlite3.connect(tmp_path / "data" / "spool.db") as spool:
                kept = spool.execute("SELECT count(*) FROM spool").fetchone()[0]
            assert kept >= len(LABELS) + len(TURNS)

            started = time.monotonic()
            await relay.heal()

            async def from_the_store() -> bool:
                return await readiness(session, url) == (200, False)

            await eventually(from_the_store, 90, "ready from the store after Neo4j returns")

            async def replayed() -> bool:
                labels, turns = await copies(neo4j_server)
                return len(labels) == len(LABELS) and len(turns) == len(TURNS)

            await eventually(replayed, 30, "spool replayed")
            labels, turns = await copies(neo4j_server)
            assert set(labels.values()) == {1} and set(turns.values()) == {1}
            assert await spool_depth(session, url, "exemplar") == 0
            print(f"replayed {time.monotonic() - started:.1f}s after Neo4j was reachable again")
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
