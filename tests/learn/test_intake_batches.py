"""Intake batches on real stores (SQLite and Neo4j): one lookup, one record and one save per
batch, and a turn that cannot be processed costs only itself."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from tests.learn.test_learner import TOOLS, Harness
from tests.neo4j_server import NEO4J
from tests.store.conftest import StoreFactory
from tests.stubs import Stub
from toolselect.names import normalise_query
from toolselect.records import Exemplar, SaveResult, Turn
from toolselect.store.port import Store

CONFIDENT = "send an email message to Marco"  # the ranker's top-1 is send_email, clearly
RATCHETED = "quanto costa un bitcoin adesso"  # labelled before the batch: the ratchet answers


class CountingStore:
    """The real store, with every call counted by method name (a test-only pass-through)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if not callable(target):
            return target

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return target(*args, **kwargs)

        return counted

    async def record_turns(self, turns: Sequence[Turn]) -> int:
        self.calls["record_turns"] += 1
        return await self.inner.record_turns(turns)

    async def save_exemplars(
        self, exemplars: Sequence[Exemplar], *, replayed: bool = False
    ) -> SaveResult:
        self.calls["save_exemplars"] += 1
        return await self.inner.save_exemplars(exemplars, replayed=replayed)

    async def exemplars_for_queries(self, queries: Sequence[str]) -> dict[str, Exemplar]:
        self.calls["exemplars_for_queries"] += 1
        return await self.inner.exemplars_for_queries(queries)


@pytest_asyncio.fixture(params=["sqlite", NEO4J], loop_scope="function")
async def real_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A migrated store of each kind holding the test catalog."""
    server = request.getfixturevalue("neo4j_server") if request.param == "neo4j" else None
    factory = StoreFactory(request.param, tmp_path, server)
    try:
        store = await factory.make()
        await store.upsert_tools(TOOLS)
        yield store
    finally:
        await factory.aclose()


async def _harness(store: Any, stub: Stub) -> Harness:
    harness = Harness(store, stub)
    await harness.load_catalog()
    harness.learner.open()  # queue without a worker, so what follows is taken as one batch
    return harness


async def _run_one_batch(harness: Harness) -> None:
    harness.learner.start()
    assert await harness.learner.drain(30.0)
    assert harness.learner.stats.batches == 1


async def test_one_lookup_one_record_one_save_per_batch(
    real_store: Store, anthropic_stub: Stub
) -> None:
    """A batch of unflagged, ranker-labelled and ratchet turns makes one call of each kind."""
    ratchet = Exemplar(
        id=uuid.uuid4().hex, query=RATCHETED, tool="crypto_price", tier="teacher",
        embedder="hashing-v1", embedding=(1.0, 0.0), created_at=datetime.now(UTC),
    )  # fmt: skip
    await real_store.save_exemplars([ratchet])
    store = CountingStore(real_store)
    harness = await _harness(store, anthropic_stub)
    try:
        learner = harness.learner
        learner.observe("weather in Turin tomorrow", "get_weather", turn_id="plain-1")
        learner.observe("search the web for pages about tapirs", "web_search", turn_id="plain-2")
        for i in range(3):
            learner.observe(f"{CONFIDENT} ref {i}", "shell_exec", turn_id=f"ranker-{i}")
        learner.observe(RATCHETED.upper(), "shell_exec", turn_id="ratchet-1")
        await _run_one_batch(harness)
        assert store.calls["exemplars_for_queries"] == 1
        assert store.calls["record_turns"] == 1
        assert store.calls["save_exemplars"] == 1
        assert store.calls["exemplar_for_query"] == store.calls["save_exemplar"] == 0
        decided = {}
        for turn_id in ("plain-1", "plain-2", "ranker-0", "ranker-1", "ranker-2", "ratchet-1"):
            turn = await real_store.get_turn(turn_id)
            assert turn is not None, turn_id
            decided[turn_id] = (turn.tier, turn.result, turn.label)
        assert decided == {
            "plain-1": (None, None, None),
            "plain-2": (None, None, None),
            **{f"ranker-{i}": ("ranker", "labeled", "send_email") for i in range(3)},
            "ratchet-1": ("ratchet", "labeled", "crypto_price"),
        }
        assert sorted(e.query for e in harness.saved) == [f"{CONFIDENT} ref {i}" for i in range(3)]
        assert learner.stats.saved == 3 and learner.stats.failed_turns == 0
        assert anthropic_stub.received == []
    finally:
        await harness.learner.close(1.0)
        await harness.teacher.aclose()


async def test_overlapped_batches_reach_the_store_in_order(
    real_store: Store, anthropic_stub: Stub
) -> None:
    """With each batch ranked while the one before is written, every batch's ratchet lookup
    still sees the labels saved by the batches before it, and every turn is recorded."""
    harness = Harness(real_store, anthropic_stub, batch_size=2, overlap_writes=True)
    await harness.load_catalog()
    learner = harness.learner
    learner.open()
    try:
        queries = [f"{CONFIDENT} ref {i}" for i in range(2)]
        for round_ in ("first", "again"):
            for i, query in enumerate(queries):
                learner.observe(query, "shell_exec", turn_id=f"{round_}-{i}")
        for i in range(4):
            learner.observe("weather in Turin tomorrow", "get_weather", turn_id=f"plain-{i}")
        learner.start()
        assert await learner.drain(30.0)
        assert learner.stats.batches == 4 and learner.stats.processed == 8
        decided = {}
        for turn_id in [f"{r}-{i}" for r in ("first", "again", "plain") for i in range(2)]:
            turn = await real_store.get_turn(turn_id)
            assert turn is not None, turn_id
            decided[turn_id] = (turn.tier, turn.result, turn.label)
        assert decided == {
            **{f"first-{i}": ("ranker", "labeled", "send_email") for i in range(2)},
            **{f"again-{i}": ("ratchet", "labeled", "send_email") for i in range(2)},
            **{f"plain-{i}": (None, None, None) for i in range(2)},
        }
        assert await real_store.get_turn("plain-3") is not None
        assert learner.stats.failed_turns == 0 and learner.stats.errors == 0
    finally:
        await learner.close(1.0)
        await harness.teacher.aclose()


async def test_a_turn_that_cannot_be_stored_costs_only_itself(
    real_store: Store, anthropic_stub: Stub
) -> None:
    """A turn whose text no store can encode (a lone UTF-16 surrogate, which the in-process
    API accepts) fails alone: counted, logged with its id, and every other turn recorded."""
    harness = await _harness(real_store, anthropic_stub)
    try:
        learner = harness.learner
        learner.observe("weather in Turin tomorrow", "get_weather", turn_id="good-1")
        learner.observe("broken \ud800 text", "web_search", turn_id="bad-1")
        learner.observe(f"{CONFIDENT} please", "shell_exec", turn_id="good-2")
        learner.observe("search the web for tapirs", "web_search", turn_id="good-3")
        with capture_logs() as logs:
            await _run_one_batch(harness)
        for turn_id in ("good-1", "good-2", "good-3"):
            assert await real_store.get_turn(turn_id) is not None, turn_id
        labelled = await real_store.exemplars_for_queries([f"{CONFIDENT} please"])
        assert [e.tool for e in labelled.values()] == ["send_email"]
        assert learner.stats.failed_turns == 1 and learner.stats.errors == 0
        assert learner.stats.processed == 4
        assert harness.counter("intake_failed_turns") == 1
        failed = [entry for entry in logs if entry["event"] == "intake_turn_failed"]
        assert [entry["turn_id"] for entry in failed] == ["bad-1"]
        assert normalise_query(f"{CONFIDENT} please") in labelled
    finally:
        await harness.learner.close(1.0)
        await harness.teacher.aclose()
