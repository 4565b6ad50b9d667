"""The write spool in front of a store whose server is down (a real driver aimed at a
closed port), then replayed into a real SQLite store."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import neo4j
import pytest
import pytest_asyncio

from toolselect.errors import StoreUnavailable
from toolselect.metrics import Metrics
from toolselect.records import Exemplar, OracleCall, SaveResult, Tool, Turn
from toolselect.store.buffered import BufferedStore
from toolselect.store.neo4j.store import Neo4jStore
from toolselect.store.port import lookup_one, save_one
from toolselect.store.spool import Spool
from toolselect.store.sqlite.store import SqliteStore

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def turn(i: int) -> Turn:
    return Turn(id=f"t{i}", request=f"request {i}", used_tool="shell_exec", at=NOW)


def exemplar(query: str, tool: str, tier: str) -> Exemplar:
    return Exemplar(
        id=f"{query}-{tier}", query=query, tool=tool, tier=tier, embedder="hashing-v1",  # type: ignore[arg-type]
        embedding=(1.0, 0.0), created_at=NOW,
    )  # fmt: skip


@pytest_asyncio.fixture(loop_scope="function")
async def down(tmp_path: Path) -> AsyncIterator[tuple[BufferedStore, Metrics]]:
    """A buffered store whose backend refuses every connection."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    driver = neo4j.AsyncGraphDatabase.driver(
        f"bolt://127.0.0.1:{port}", connection_timeout=1, max_transaction_retry_time=0
    )
    metrics = Metrics()
    spool = Spool.open(tmp_path / "spool.db", max_bytes=1000)
    store = BufferedStore(Neo4jStore(driver, uri=f"bolt://127.0.0.1:{port}"), spool=spool,
                          metrics=metrics)  # fmt: skip
    yield store, metrics
    await store.close()
    await driver.close()


async def test_writes_wait_in_a_bounded_spool(down: tuple[BufferedStore, Metrics]) -> None:
    """Past the spool's bound the oldest turns are dropped before any oracle call or label,
    and each drop is counted by kind."""
    store, metrics = down
    await save_one(store, exemplar("keep me", "a", "feedback"))
    call = OracleCall(id="c1", provider="anthropic", model="m", result="error", latency_ms=1.0,
                      at=NOW)  # fmt: skip
    await store.record_oracle_call(call)
    assert await store.record_turns([turn(i) for i in range(8)]) == 8
    assert store.down and store.spool.size <= 1000
    depth = store.spool.depth
    assert depth["exemplar"] == 1 and depth["oracle_call"] == 1 and 0 < depth["turn"] < 8
    sample = metrics.value
    assert sample("toolselect_store_backlog_dropped_total", {"kind": "turn"}) == 8 - depth["turn"]
    assert sample("toolselect_store_backlog_dropped_total", {"kind": "exemplar"}) is None
    assert sample("toolselect_spool_depth", {"kind": "turn"}) == depth["turn"]
    assert await store.flush() == 0  # still down: nothing written, nothing lost
    assert store.spool.depth == depth


async def test_pending_labels_keep_the_tier_order(down: tuple[BufferedStore, Metrics]) -> None:
    """While down, a weaker label never replaces a pending stronger one, and the ratchet
    lookup answers from the backlog."""
    store, _ = down
    assert await save_one(store, exemplar("Hello  World", "a", "feedback"))
    assert not await save_one(store, exemplar("hello world", "b", "teacher"))
    assert not await save_one(store, exemplar("hello world", "a", "feedback"))
    pending = await lookup_one(store, "HELLO world")
    assert pending is not None and (pending.tool, pending.tier) == ("a", "feedback")
    assert await lookup_one(store, "unknown query") is None


async def test_reads_fail_fast_while_down(down: tuple[BufferedStore, Metrics]) -> None:
    """After one failure, reads raise StoreUnavailable without another round trip."""
    store, _ = down
    await store.record_turns([turn(1)])
    with pytest.raises(StoreUnavailable):
        await store.list_tools()
    with pytest.raises(StoreUnavailable):
        await store.state()


async def test_retention_is_never_spooled(down: tuple[BufferedStore, Metrics]) -> None:
    """While down, a retention pass fails fast (the upkeep tries it once the spool is
    replayed) and leaves nothing in the spool."""
    store, metrics = down
    await store.record_turns([turn(1)])
    depth = store.spool.depth
    with pytest.raises(StoreUnavailable):
        await store.expire_exemplars(NOW)
    with pytest.raises(StoreUnavailable):
        await store.delete_turns(NOW, 100)
    assert store.spool.depth == depth
    assert metrics.value("toolselect_store_errors_total", {"operation": "delete_turns"}) is None


async def test_flush_writes_in_order_into_a_live_store(tmp_path: Path) -> None:
    """A backlog replayed into a live store lands whole, the turn's last version winning."""
    inner = SqliteStore(tmp_path / "live.db")
    await inner.migrate()
    await inner.upsert_tools([Tool("a", "tool a")])
    store = BufferedStore(inner)
    store.last_error = "simulated outage"  # as set by a failed call: writes now queue
    await store.record_turns([turn(1)])
    await store.record_turns([Turn(id="t1", request="request 1", used_tool="shell_exec", at=NOW,
                                   result="labeled", label="a")])  # fmt: skip
    await save_one(store, exemplar("q", "a", "teacher"))
    assert store.backlog == 3
    assert await store.flush() == 3
    assert not store.down and store.backlog == 0
    stored = await inner.get_turn("t1")
    assert stored is not None and stored.label == "a"
    assert (await lookup_one(inner, "q")) is not None
    await store.close()


async def test_batches_wait_in_the_backlog_while_down(down: tuple[BufferedStore, Metrics]) -> None:
    """While down, a batch of labels is queued under the store's rules and the batch lookup
    answers from the backlog, without a round trip for what is pending."""
    store, _ = down
    await store.record_turns([turn(1)])  # the failure that puts the store in buffering mode
    result = await store.save_exemplars(
        [
            exemplar("one", "a", "ranker"),
            exemplar("ONE", "b", "feedback"),
            exemplar("one", "c", "teacher"),  # weaker than the pending feedback label
            exemplar("two", "a", "teacher"),
        ]
    )
    assert [(e.query, e.tier) for e in result.changed] == [
        ("one", "ranker"),
        ("ONE", "feedback"),
        ("two", "teacher"),
    ]
    assert result.unknown_tool == ()
    assert store.backlog == 4  # one turn, three labels (append-only: "one" twice)
    found = await store.exemplars_for_queries(["one", "Two", "three"])
    assert {k: (e.tool, e.tier) for k, e in found.items()} == {
        "one": ("b", "feedback"),
        "two": ("a", "teacher"),
    }


async def test_flush_replays_in_order_and_rejects_unknown(tmp_path: Path) -> None:
    """A replayed spool lands labels in the order they were acknowledged, and a label for a
    tool the catalog lacks is dropped, not retried forever: counted dropped, not replayed."""
    inner = SqliteStore(tmp_path / "live.db")
    await inner.migrate()
    await inner.upsert_tools([Tool("a", "tool a")])
    metrics = Metrics()
    # One save call per label: the order shows.
    store = BufferedStore(inner, exemplar_batch=1, metrics=metrics)
    store.last_error = "simulated outage"
    await store.save_exemplars(
        [
            exemplar("r", "a", "ranker"),
            exemplar("t", "a", "teacher"),
            exemplar("f", "a", "feedback"),
            exemplar("ghost", "nope", "feedback"),
        ]
    )
    assert await store.flush() == 3
    assert store.backlog == 0 and not store.down
    delta = await inner.exemplars_since(0)
    assert [e.query for e in delta.upserted] == ["r", "t", "f"]  # by version
    assert await lookup_one(inner, "ghost") is None
    count = metrics.value
    assert count("toolselect_spool_replayed_total", {"kind": "exemplar"}) == 3
    assert count("toolselect_store_backlog_dropped_total", {"kind": "exemplar_refused"}) == 1
    await store.close()


async def test_a_turn_the_store_refuses_does_not_block_the_backlog(tmp_path: Path) -> None:
    """A queued turn the live store cannot encode (a lone surrogate) is dropped and counted at
    flush; the turns around it land and the backlog empties."""
    inner = SqliteStore(tmp_path / "live.db")
    await inner.migrate()
    metrics = Metrics()
    store = BufferedStore(inner, metrics=metrics)
    store.last_error = "simulated outage"
    bad = Turn(id="bad", request="broken \ud800 text", used_tool="shell_exec", at=NOW)
    await store.record_turns([turn(1), bad, turn(2)])
    assert await store.flush() == 2
    assert store.backlog == 0 and not store.down
    assert await inner.get_turn("t1") is not None and await inner.get_turn("t2") is not None
    assert await inner.get_turn("bad") is None
    dropped = metrics.value
    assert dropped("toolselect_store_backlog_dropped_total", {"kind": "turn_refused"}) == 1
    await store.close()


class CountedStore(SqliteStore):
    """The real SQLite store, noting each write call the replay makes."""

    writes: list[str]

    async def record_turns(self, turns: Sequence[Turn]) -> int:
        self.writes.append("turns")
        return await super().record_turns(turns)

    async def record_oracle_call(self, call: OracleCall) -> None:
        self.writes.append("call")
        await super().record_oracle_call(call)

    async def save_exemplars(
        self, exemplars: Sequence[Exemplar], *, replayed: bool = False
    ) -> SaveResult:
        self.writes.append("labels")
        return await super().save_exemplars(exemplars, replayed=replayed)


async def test_a_backlog_of_turns_and_their_labels_replays_in_a_few_writes(
    tmp_path: Path,
) -> None:
    """The learner spools each turn, then its label (and a teacher's call): replayed run by run
    of one kind, that was a write per record or two (45 records a second on Neo4j, while a
    restart waits on it). A window is written a kind at a time, turns first, so each label and
    call still finds its turn, and labels keep their order: the later sighting counts."""
    inner = CountedStore(tmp_path / "live.db")
    inner.writes = []
    await inner.migrate()
    await inner.upsert_tools([Tool("a", "tool a"), Tool("b", "tool b")])
    store = BufferedStore(inner)
    store.last_error = "simulated outage"
    for i in range(40):
        await store.record_turns([replace(turn(i), used_tool="a", outcome="ok")])
        label = replace(exemplar("same request", "a", "usage"), id=f"e{i}", turn_id=f"t{i}")
        await store.save_exemplars([label])
        if i % 10 == 0:
            await store.record_oracle_call(
                OracleCall(id=f"c{i}", provider="anthropic", model="m", result="labeled",
                           latency_ms=1.0, at=NOW, turn_id=f"t{i}")
            )  # fmt: skip
    assert store.backlog == 84
    assert await store.flush() == 84
    assert inner.writes == ["turns", "call", "call", "call", "call", "labels"]
    assert all([await inner.get_turn(f"t{i}") is not None for i in range(40)])
    stored = await lookup_one(inner, "same request")
    assert stored is not None and (stored.tool, stored.count) == ("a", 40)
    assert len(await inner.oracle_calls(since=NOW - timedelta(hours=1))) == 4
    await store.close()


async def test_spooled_teacher_calls_are_read_with_the_stored_ones(tmp_path: Path) -> None:
    """A teacher call an outage spooled was paid for: `oracle_calls` (which seeds a restarted
    service's hourly budget) reads it beside the stored ones, once, before and after replay."""
    inner = SqliteStore(tmp_path / "live.db")
    await inner.migrate()
    await inner.record_turns([turn(1), turn(2)])
    store = BufferedStore(inner, spool=Spool.open(tmp_path / "spool.db", max_bytes=1 << 20))

    def call(i: int, minutes: int) -> OracleCall:
        return OracleCall(id=f"c{i}", provider="anthropic", model="m", result="labeled",
                          latency_ms=1.0, at=NOW - timedelta(minutes=minutes), turn_id=f"t{i}")  # fmt: skip

    await store.record_oracle_call(call(1, 5))
    store.last_error = "simulated outage"
    await store.record_oracle_call(call(2, 10))
    await store.record_oracle_call(call(3, 90))
    store.last_error = None  # the store answers reads again; the spool is not replayed yet
    since = NOW - timedelta(hours=1)
    assert [c.id for c in await store.oracle_calls(since=since)] == ["c2", "c1"]
    assert [c.id for c in await store.oracle_calls()] == ["c3", "c2", "c1"]
    assert [c.id for c in await store.oracle_calls(turn_id="t2")] == ["c2"]
    assert await store.flush() == 2
    assert [c.id for c in await store.oracle_calls(since=since)] == ["c2", "c1"]
    await store.close()
