"""A restart with another embedder re-embeds the catalog and the stored exemplars from their
text, and ranks correctly in the new vector space; a restart after a kill closes the teacher
turns the killed process left undecided."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from tests.services import ServiceFactory
from tests.stubs import Reply, Stub, start_stub
from toolselect.config import Settings
from toolselect.embed import HashingEmbedder
from toolselect.records import Exemplar, OracleCall, Tool, Turn
from toolselect.service import Service, TenantServices
from toolselect.store.factory import open_store
from toolselect.store.port import lookup_one, save_one

TOOLS = [
    Tool("get_weather", "Current weather and forecast for a city."),
    Tool("send_email", "Send an email message to a recipient."),
    Tool("web_search", "Search the web for pages matching a query."),
    Tool("crypto_price", "Current price of a cryptocurrency like bitcoin."),
]
LEARNED = "il prezzo di BTC ora"

# The "remote model" behind the stub: a hashing space of another size, so vectors from the
# first run are not even the same length (re-embedding is the only way to rank).
REMOTE = HashingEmbedder(dim=512)


def embeddings_endpoint(body: Any) -> Reply:
    """An OpenAI-compatible /v1/embeddings answer for the texts in the request."""
    vectors = REMOTE.embed_now(body["input"])
    return Reply(
        body={
            "object": "list",
            "model": body["model"],
            "data": [
                {"object": "embedding", "index": i, "embedding": [float(x) for x in row]}
                for i, row in enumerate(vectors)
            ],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }
    )


@pytest_asyncio.fixture(loop_scope="function")
async def embeddings_stub() -> AsyncIterator[Stub]:
    async for stub in start_stub("/v1/embeddings"):
        stub.responder = embeddings_endpoint
        yield stub


async def test_restart_with_another_embedder_reembeds(
    services: ServiceFactory, embeddings_stub: Stub
) -> None:
    """Exemplars saved under `hashing-v1` still steer ranking after a restart on `http`."""
    first = await services.start()
    await first.catalog.upsert_tools(TOOLS)
    before = await first.ranking.rank(LEARNED, 2)
    assert before.results[0].tool != "crypto_price"
    await first.learning.feedback(LEARNED, "crypto_price")
    assert (await first.ranking.rank(LEARNED, 1)).results[0].tool == "crypto_price"
    stored = await lookup_one(first.store, LEARNED)
    assert stored is not None and stored.embedder == "hashing-v1"
    await first.close()
    services.started.remove(first)

    second = await services.start(
        embedder="http", embed_url=embeddings_stub.url, embed_model="stub-model"
    )
    assert second.embedder.id == "http-stub-model"
    assert second.ranker.dim == 512
    assert second.ranker.exemplar_total == 1
    ranking = await second.ranking.rank(LEARNED, 2)
    assert ranking.results[0].tool == "crypto_price"
    # Weather still goes to weather: the description vectors were re-embedded too.
    assert (await second.ranking.rank("weather forecast for Turin", 1)).results[
        0
    ].tool == "get_weather"
    texts = [t for r in embeddings_stub.received for t in r.body["input"]]
    assert LEARNED in texts


async def test_exemplars_of_the_torch_minilm_are_reembedded_by_the_onnx_one(
    services: ServiceFactory,
) -> None:
    """An exemplar stored under the PyTorch MiniLM id is re-embedded, not reused, on `minilm`."""
    service = await services.start(embedder="minilm", description_weight=0.0)
    assert service.embedder.id == "minilm-all-MiniLM-L6-v2-onnx-int8"
    await service.catalog.upsert_tools(TOOLS)
    # Same width as the new vectors, so only the id tells them apart: here it points at
    # weather, while the query is about bitcoin.
    (stale,) = await service.embedder.embed(["weather forecast for Turin"])
    await save_one(
        service.store,
        Exemplar(
            id="ex-torch",
            query=LEARNED,
            tool="crypto_price",
            tier="feedback",  # a trusted label: folded whatever the fitted self-label weight
            embedder="minilm-all-MiniLM-L6-v2",
            embedding=tuple(float(x) for x in stale),
            created_at=datetime.now(UTC),
        ),
    )
    await service.index.reload()
    top = (await service.ranking.rank(LEARNED, 1)).results[0]
    # With no description weight the centroid is the exemplar alone: cosine 1 to its query.
    assert (top.tool, round(top.score, 3)) == ("crypto_price", 1.0)


async def test_a_restart_reads_the_catalogs_vectors_from_disk(services: ServiceFactory) -> None:
    """With a model embedder, the vectors of the tools a service embedded are kept on disk
    (`TOOLSELECT_VECTOR_CACHE`): a restart, and a tenant's start after it was closed, read them
    instead of running the model (every tool a hit, none a miss) and rank bit for bit as
    before; with the cache off nothing is read from it."""
    hits, misses = (
        ("toolselect_catalog_vectors_total", {"result": result}) for result in ("hit", "miss")
    )
    first = await services.start(embedder="minilm")
    await first.catalog.upsert_tools(TOOLS)
    assert first.metrics.value(*misses) == len(TOOLS)
    ranked = await first.ranking.rank(LEARNED, 4)
    await first.close()
    services.started.remove(first)

    again = await services.start(embedder="minilm")
    assert (again.metrics.value(*hits), again.metrics.value(*misses)) == (len(TOOLS), 0)
    assert await again.ranking.rank(LEARNED, 4) == ranked

    tenants = TenantServices(again)
    try:
        team = await tenants.get("team-a")
        assert team.parts.vectors is again.parts.vectors is not None  # one file connection
        await team.catalog.upsert_tools(TOOLS)
        await tenants.close_tenant("team-a")
        team = await tenants.get("team-a")
        assert (team.metrics.value(*hits), team.metrics.value(*misses)) == (2 * len(TOOLS), 0)
    finally:
        await tenants.close_others()

    off = await services.start(embedder="minilm", vector_cache=0)
    assert off.parts.vectors is None and off.metrics.value(*hits) is None
    assert await off.ranking.rank(LEARNED, 4) == ranked


async def test_a_service_closes_the_teacher_turns_a_killed_process_left(
    services: ServiceFactory,
) -> None:
    """A process killed while the teacher was asked leaves its turn `tier=teacher` with no
    result: the next service on the store closes it `error` once loaded (the analyses stop
    counting it in flight), while a turn under an hour old is left to whoever may teach it."""
    store = await open_store(services.settings())
    await store.migrate()
    now = datetime.now(UTC)
    left = Turn("killed", LEARNED, "shell_exec", now - timedelta(hours=3), flagged=True)
    recent = replace(left, id="recent", at=now - timedelta(minutes=5))
    await store.record_turns([replace(t, tier="teacher") for t in (left, recent)])
    await store.close()

    service = await services.start()
    for _ in range(100):
        turn = await service.store.get_turn("killed")
        if turn is not None and turn.result is not None:
            break
        await asyncio.sleep(0.05)
    assert turn is not None and (turn.tier, turn.result) == ("teacher", "error")
    still = await service.store.get_turn("recent")
    assert still is not None and still.result is None
    closed = service.metrics.value("toolselect_teacher_abandoned_total", {})
    assert closed == 1


async def test_a_spool_an_outage_left_is_replayed_behind_a_ready_start(tmp_path: Path) -> None:
    """Turns and labels a process spooled in an outage, then stopped: the next start serves at
    once (loaded, its learner taking turns) and replays them behind it, in order, and the
    labels reach its ranker. Replayed before the load, a spool of 3,490 records kept a
    restarted server 503 for 84 s, its queue refusing the turns sent meanwhile."""
    settings = Settings(
        store=f"sqlite:{tmp_path / 'ts.db'}", data_dir=str(tmp_path), embedder="hashing",
        oracle="off", poll_interval_s=0.2,
    )  # fmt: skip
    first = await Service.start(settings)
    try:
        await first.catalog.upsert_tools(TOOLS)
        first.store.last_error = "simulated outage"  # as a failed write leaves it: writes spool
        for i in range(50):
            first.learning.observe(f"weather in city {i}", "get_weather", outcome="ok")
        await first.learning.feedback(LEARNED, "crypto_price")
        assert await first.learner.drain(30.0)
        assert first.store.backlog == 101  # 50 turns, their 50 usage labels, 1 feedback
    finally:
        await first.close()
    second = await Service.start(settings)
    try:
        assert second.loaded and second.store.backlog == 101  # serving before the replay
        found = await second.ranking.search("weather in Rome", 1)
        assert found.ranking.tools == ("get_weather",)
        for _ in range(300):
            if not second.store.backlog and second.index.ranker.exemplar_count("crypto_price"):
                break
            await asyncio.sleep(0.05)
        assert second.store.backlog == 0
        assert second.index.ranker.exemplar_count("crypto_price") == 1  # by the poll
        stored = await lookup_one(second.store, LEARNED)
        assert stored is not None and stored.tool == "crypto_price"
        assert len(await second.store.exemplars_for_tool("get_weather")) == 50
    finally:
        await second.close()


async def test_a_restart_counts_the_teacher_calls_its_spool_holds(
    tmp_path: Path, anthropic_stub: Stub
) -> None:
    """The hourly teacher budget is seeded at start from the calls billed in the last hour;
    those an outage spooled were billed too, and a start now serves before replaying them:
    read from the store alone, a crash loop in an outage spent them again every start."""
    settings = Settings(
        store=f"sqlite:{tmp_path / 'ts.db'}", data_dir=str(tmp_path), embedder="hashing",
        teacher="anthropic", anthropic_api_key="test", anthropic_base_url=anthropic_stub.url,
        teacher_budget_per_hour=10, poll_interval_s=60,
    )  # fmt: skip
    first = await Service.start(settings)
    try:
        first.store.last_error = "simulated outage"
        for i in range(3):
            await first.store.record_oracle_call(
                OracleCall(id=f"c{i}", provider="anthropic", model="m", result="labeled",
                           latency_ms=1.0, at=datetime.now(UTC) - timedelta(minutes=i))
            )  # fmt: skip
        assert first.store.backlog == 3
    finally:
        await first.close()
    second = await Service.start(settings)
    try:
        assert second.oracle.budget.remaining() == 7
    finally:
        await second.close()


async def test_a_start_names_the_variables_that_are_no_setting(
    services: ServiceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A misspelt `TOOLSELECT_*` variable is logged when the process's service starts (once:
    not again for each tenant's), where it was ignored in silence."""
    monkeypatch.setenv("TOOLSELECT_POLL_INTERVAL_S", "1")
    with capture_logs() as logs:
        tenants = TenantServices(await services.start())
        try:
            await tenants.get("team-a")
        finally:
            await tenants.close_others()
    said = [e["problem"] for e in logs if e["event"] == "setting_ignored"]
    assert said == [
        "TOOLSELECT_POLL_INTERVAL_S: no such setting, ignored "
        "(did you mean TOOLSELECT_POLL_INTERVAL?)"
    ]
