"""What `toolselect serve` logs, and how fast `/readyz` answers, while its Neo4j is away: a real
server process on the session's Neo4j through a relay the test cuts and heals, its stderr read
line by line."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import serving
from tests.faults.test_neo4j_faults import CATALOG
from tests.neo4j_server import Neo4jServer
from tests.partition import ThreadedPartition, relay_thread
from tests.services import cli_env, wipe

pytestmark = [pytest.mark.neo4j, pytest.mark.slow]


@pytest.fixture
def neo4j_to_cut(neo4j_server: Neo4jServer) -> Iterator[ThreadedPartition]:
    """A relay to the session Neo4j (wiped first), on a thread of its own: this test blocks."""
    asyncio.run(wipe(neo4j_server))
    with relay_thread(neo4j_server) as relay:
        yield relay


def call(url: str, method: str = "GET", body: Any = None) -> tuple[int, float, Any]:
    """Status, seconds taken and JSON answer of one request."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            status, text = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read()
    return status, time.monotonic() - started, json.loads(text) if text else None


def test_an_outage_logs_two_lines_and_readiness_answers_at_once(
    neo4j_server: Neo4jServer, neo4j_to_cut: ThreadedPartition, tmp_path: Path
) -> None:
    """Neo4j lost under a serving process for about ten seconds of traffic (probes,
    rankings, turns, catalog writes refused `503 store_unavailable`): each `/readyz` answers
    `503` in well under a second (it took the 2 s bound: the driver retried the refused
    connection), the driver's retry warnings appear once, not every attempt, the refusals
    once a route, not once a request, and the outage itself is two lines:
    `store_unreachable`, then `store_reachable` with how long it was down, the requests
    refused and the writes spooled meanwhile."""
    env = cli_env(
        tmp_path / "unused.db",
        TOOLSELECT_STORE="neo4j",
        **neo4j_server.env(),
        TOOLSELECT_POLL_INTERVAL="0.5",
        TOOLSELECT_LOG_LEVEL="info",
    ) | {"NEO4J_URI": neo4j_to_cut.uri}
    logged: list[str] = []
    probes: list[tuple[int, float]] = []
    refused = 0
    with serving(env, logged) as url:
        assert call(url + "/v1/tools", "PUT", CATALOG)[0] == 200
        neo4j_to_cut.cut()
        try:
            outage_ends = time.monotonic() + 10
            turn = 0
            while time.monotonic() < outage_ends:
                status, took, _ = call(url + "/readyz")
                probes.append((status, took))
                assert call(url + "/v1/rank", "POST", {"query": "weather in Turin"})[0] == 200
                turn += 1
                observed = {"request": f"mail {turn}", "used_tool": "send_email", "outcome": "ok"}
                assert call(url + "/v1/observe", "POST", observed)[0] == 202
                status, _, answer = call(url + "/v1/tools", "PUT", CATALOG)
                assert status == 503 and answer["error"]["code"] == "store_unavailable"
                refused += 1
                time.sleep(0.1)
        finally:
            neo4j_to_cut.heal()
        deadline = time.monotonic() + 90
        while call(url + "/readyz")[0] != 200:
            assert time.monotonic() < deadline, "not ready again after the outage"
            time.sleep(0.2)
    [err] = logged
    events = [json.loads(line) for line in err.splitlines()]

    assert len(probes) >= 5 and {status for status, _ in probes} == {503}
    assert max(took for _, took in probes) < 0.5, probes

    driver = Counter(
        (e["logger"], e["event"][:40]) for e in events if e.get("logger", "").startswith("neo4j")
    )
    assert driver and max(driver.values()) == 1, driver

    refusals = Counter((e["route"], e["code"]) for e in events if e["event"] == "request_error")
    assert refusals == {("/readyz", "not_ready"): 1, ("/v1/tools", "store_unavailable"): 1}

    # From the refused connection on: a store just started may miss the 2 s bound once before
    # the catalog upload (its own short outage, logged as such, "no answer within 2 s").
    first = next(i for i, e in enumerate(events) if "cannot reach Neo4j" in e.get("error", ""))
    outage = [e for e in events[first:] if e["event"] in ("store_unreachable", "store_reachable")]
    assert [e["event"] for e in outage] == ["store_unreachable", "store_reachable"], events
    lost, back = outage
    assert lost["level"] == back["level"] == "warning"
    assert neo4j_to_cut.uri in lost["error"]
    assert back["down_s"] >= 10 and back["refused"] == refused and back["spooled"] > 0
