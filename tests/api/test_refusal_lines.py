"""A service that is not ready answers every request `503`, and a busy one gets thousands a
minute: the log says so once, then at most once a window with how many it left out, while
every refusal is counted on `/metrics`. The store here is a Neo4j address nobody listens on,
what a stopped Neo4j looks like from outside."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from tests.services import ClientFactory, free_port
from toolselect.api.app import create_app_from_settings
from toolselect.api.middleware import REPEATS
from toolselect.config import Settings
from toolselect.logs import Repeats


class Ticks:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stopped_neo4j(tmp_path: Path) -> Settings:
    return Settings(
        store="neo4j",
        neo4j_uri=f"bolt://127.0.0.1:{free_port()}",
        embedder="hashing",
        data_dir=str(tmp_path),
        shutdown_timeout_s=1.0,
    )


async def test_rankings_refused_not_ready_log_one_line_then_a_count(
    tmp_path: Path, aiohttp_client: ClientFactory
) -> None:
    """Thirty rankings refused `not_ready` log one `request_error` line (the first), not
    thirty; the first refused after the window logs one more, counting the 29 left out; the
    metrics count all 31; readiness probes are no refused requests."""
    ticks = Ticks()
    app = create_app_from_settings(stopped_neo4j(tmp_path))
    app[REPEATS] = Repeats(60.0, now=ticks)
    client = await aiohttp_client(app)
    with capture_logs() as logs:
        for _ in range(30):
            refused = await client.post("/v1/rank", json={"query": "weather in Turin"})
            assert refused.status == 503
            assert (await refused.json())["error"]["code"] == "not_ready"
        assert (await client.get("/readyz")).status == 503
        ticks.now += 61.0
        assert (await client.post("/v1/rank", json={"query": "weather"})).status == 503
    lines = [e for e in logs if e["event"] == "request_error" and e["route"] == "/v1/rank"]
    assert [(e["code"], e.get("repeated")) for e in lines] == [
        ("not_ready", None),
        ("not_ready", 29),
    ]
    assert all(e["log_level"] == "warning" and "store unreachable" in e["error"] for e in lines)
    metrics = await (await client.get("/metrics")).text()
    assert 'toolselect_http_requests_total{route="/v1/rank",status="503"} 31.0' in metrics
    assert 'toolselect_http_rejected_total{reason="not_ready"} 31.0' in metrics
