"""The durable write spool on its own (order, bounds, damaged files) and replayed into both
real stores (a replay repeated after a crash leaves one copy of everything)."""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.store.conftest import StoreFactory
from toolselect.config import Settings
from toolselect.errors import SpoolError
from toolselect.metrics import Metrics
from toolselect.records import Exemplar, OracleCall, Tool, Turn
from toolselect.service import Service
from toolselect.store.buffered import BufferedStore
from toolselect.store.spool import Dropped, Spool

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def turn(i: int, **changes: str) -> Turn:
    values = {"request": f"request {i}"} | changes
    return Turn(id=f"t{i}", used_tool="a", at=NOW, **values)  # type: ignore[arg-type]


def label(query: str, tool: str = "a", tier: str = "teacher", i: int = 0) -> Exemplar:
    return Exemplar(
        id=f"{query}-{tier}-{i}", query=query, tool=tool, tier=tier,  # type: ignore[arg-type]
        embedder="hashing-v1", embedding=(0.25, -1.5, 3.0), created_at=NOW + timedelta(i),
    )  # fmt: skip


def call(i: int) -> OracleCall:
    return OracleCall(id=f"c{i}", provider="anthropic", model="m", result="labeled",
                      latency_ms=12.5, at=NOW, turn_id=f"t{i}")  # fmt: skip


def test_records_come_back_in_append_order_after_reopening(tmp_path: Path) -> None:
    """Interleaved turns, labels and calls are read back whole, in append order, by a new
    process's open of the same file (odd text and timestamps included)."""
    spool = Spool.open(tmp_path / "spool.db", max_bytes=1 << 20)
    records: list[Turn | Exemplar | OracleCall] = [
        turn(1),
        label("q1"),
        call(1),
        turn(2, request="broken \ud800 text"),
        label("q2"),
    ]
    for record in records:
        if isinstance(record, Exemplar):
            assert spool.append_labels([record])[0] == [record]
        else:
            spool.append([record])
    spool.close()
    again = Spool.open(tmp_path / "spool.db", max_bytes=1 << 20)
    entries = again.head(100)
    assert [e.record for e in entries] == records
    assert [e.id for e in entries] == sorted(e.id for e in entries)
    assert again.depth == {"turn": 2, "oracle_call": 1, "exemplar": 2}
    again.remove(entries[:2])
    assert [e.record for e in again.head(100)] == records[2:]
    again.close()


def test_pending_labels_follow_the_store_rules(tmp_path: Path) -> None:
    """A weaker or repeated label is not appended, and the pending label of a query is the
    last one that changed it."""
    spool = Spool.open(tmp_path / "spool.db", max_bytes=1 << 20)
    first, stronger = label("Hello  World", "a", "teacher"), label("hello world", "b", "feedback")
    changed, _ = spool.append_labels([first, stronger, label("HELLO world", "a", "ranker")])
    assert changed == [first, stronger]
    assert spool.append_labels([stronger])[0] == []
    assert spool.pending_labels({"hello world", "other"}) == {"hello world": stronger}
    assert spool.depth["exemplar"] == 2
    spool.close()


def test_a_full_spool_drops_turns_then_calls_then_weak_labels(tmp_path: Path) -> None:
    """Past the bound the oldest turns go first, then oracle calls, then labels from the
    weakest tier; a human label is the last thing kept, and its query is named when it goes
    (the live ranker folded it when it was spooled)."""
    spool = Spool.open(tmp_path / "spool.db", max_bytes=1 << 20)
    spool.append_labels([label("f", tier="feedback"), label("t", tier="teacher")])
    spool.append_labels([label("r", tier="ranker")])
    spool.append([call(1), turn(1), turn(2)])
    feedback_size = spool.head(1)[0].size
    spool.close()

    full = Spool.open(tmp_path / "spool.db", max_bytes=spool.size)  # exactly full
    assert full.append([turn(3)]) == Dropped({"turn": 1})  # the oldest turn made room
    assert [e.record.id for e in full.head(100)][-2:] == ["t2", "t3"]
    assert full.depth == {"turn": 2, "oracle_call": 1, "exemplar": 3}

    tiny = Spool.open(tmp_path / "spool.db", max_bytes=feedback_size)
    assert tiny.append([turn(4)]) == Dropped({"turn": 3, "oracle_call": 1, "exemplar": 2})
    assert [e.record.id for e in tiny.head(100)] == ["f-feedback-0"]
    _, dropped = tiny.append_labels([label("g", tier="feedback", i=1)])
    assert dropped == Dropped({"exemplar": 1}, frozenset({"f"}))
    assert [e.record.id for e in tiny.head(100)] == ["g-feedback-1"]
    for opened in (full, tiny):
        opened.close()


def test_a_damaged_spool_stops_the_start_with_its_path(tmp_path: Path) -> None:
    """A file that is not a spool raises SpoolError naming it, rather than being ignored or
    replaced (it may hold acknowledged labels)."""
    path = tmp_path / "spool.db"
    path.write_bytes(b"this is not a database, it is a ransom note" * 100)
    with pytest.raises(SpoolError, match=re.escape(str(path))):
        Spool.open(path, max_bytes=1 << 20)
    assert path.read_bytes().startswith(b"this is not a database")


def test_an_unwritable_spool_place_stops_the_start(tmp_path: Path) -> None:
    """A data folder that is a file (no spool can be created there) raises SpoolError."""
    blocker = tmp_path / "data"
    blocker.write_text("a file where the data folder should be")
    with pytest.raises(SpoolError, match="cannot open the write spool"):
        Spool.open(blocker / "spool.db", max_bytes=1 << 20)


async def test_the_service_refuses_to_start_on_a_damaged_spool(tmp_path: Path) -> None:
    """`Service.start` fails with SpoolError when the data folder's spool is damaged."""
    (tmp_path / "spool.db").write_bytes(b"\x00garbage" * 512)
    settings = Settings(store=f"sqlite:{tmp_path / 'store.db'}", data_dir=str(tmp_path),
                        embedder="hashing")  # fmt: skip
    with pytest.raises(SpoolError, match=re.escape(str(tmp_path / "spool.db"))):
        await Service.start(settings)


@pytest.mark.reopens
async def test_a_replay_repeated_after_a_crash_leaves_one_copy(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    """A spool replayed, then replayed again from a copy taken before (a crash between the
    store's ack and the removal), leaves each turn, label and call stored once."""
    inner = await store_factory.make()
    await inner.upsert_tools([Tool("a", "tool a"), Tool("b", "tool b")])
    path = tmp_path / "spool" / "spool.db"
    metrics = Metrics()
    store = BufferedStore(inner, spool=Spool.open(path, max_bytes=1 << 20), metrics=metrics)
    store.last_error = "simulated outage"  # as set by a failed call: writes now spool
    await store.record_turns([turn(1), turn(2)])
    await store.save_exemplars([label("q1", "a", "teacher", 1), label("q2", "b", "ranker", 2)])
    await store.record_oracle_call(call(1))
    await store.save_exemplars([label("q1", "b", "feedback", 3)])
    await store.record_turns([turn(1, label="b", result="labeled")])
    copy = tmp_path / "before"
    copy.mkdir()
    for file in path.parent.iterdir():
        shutil.copy(file, copy / file.name)
    assert await store.flush() == 7
    first = await inner.exemplars_since(0)
    await store.close()

    for file in copy.iterdir():
        shutil.copy(file, path.parent / file.name)
    inner = await store_factory.reopen(inner)  # a new connection on the same data
    again = BufferedStore(inner, spool=Spool.open(path, max_bytes=1 << 20))
    assert again.backlog == 7
    assert await again.flush() == 7 and again.backlog == 0
    labels = await inner.exemplars_for_queries(["q1", "q2"])
    assert {k: (e.tool, e.tier) for k, e in labels.items()} == {
        "q1": ("b", "feedback"),
        "q2": ("b", "ranker"),
    }
    assert (await inner.exemplars_since(0)).version == first.version  # nothing changed
    assert len(await inner.exemplars_for_tool("b")) == 2
    assert len(await inner.oracle_calls()) == 1
    stored = await inner.get_turn("t1")
    assert stored is not None and stored.label == "b"
    assert metrics.value("toolselect_spool_replayed_total",
                                             {"kind": "exemplar"}) == 3  # fmt: skip
    await again.close()
