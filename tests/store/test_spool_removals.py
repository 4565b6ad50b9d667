"""Labels an outage spooled, and what removed or replaced them before the replay: the replay
writes none of them back. The outage is real: another connection holds the SQLite store's
write lock; the store then answers again, and a new BufferedStore (the next start) finds the
spool waiting, as a service started on a spool an outage left does."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest_asyncio
from structlog.testing import capture_logs

from toolselect.records import Exemplar, Tool
from toolselect.store.buffered import BufferedStore
from toolselect.store.port import lookup_one, save_one
from toolselect.store.spool import Spool
from toolselect.store.sqlite.store import SqliteStore

NOW = datetime(2026, 11, 27, 6, 0, tzinfo=UTC)
TOOLS = [Tool("crypto_price", "Price of a cryptocurrency."), Tool("get_weather", "Weather.")]
QUERY = "il prezzo di BTC ora"
SPOOLED = Exemplar(
    id="spooled", query=QUERY, tool="crypto_price", tier="feedback", embedder="hashing-v1",
    embedding=(1.0, 0.0), created_at=NOW,
)  # fmt: skip


@contextlib.contextmanager
def write_locked(db: Path) -> Iterator[None]:
    """The SQLite file's write lock held by another connection for the body: the store does
    not answer a write, so a buffered store over it spools."""
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        lock.execute("ROLLBACK")
        lock.close()


@contextlib.asynccontextmanager
async def two_workers(
    tmp_path: Path, tools: Sequence[Tool]
) -> AsyncIterator[tuple[BufferedStore, BufferedStore]]:
    """Two buffered stores over one SQLite store holding `tools` and one spool file, as two
    workers of `serve --workers` hold them; closed after the body."""
    db, spool = tmp_path / "toolselect.db", tmp_path / "spool.db"
    inner = SqliteStore(db, busy_timeout=0.1)
    await inner.migrate()
    await inner.upsert_tools(tools)
    writer = BufferedStore(inner, spool=Spool.open(spool, max_bytes=1 << 20))
    other = BufferedStore(SqliteStore(db), spool=Spool.open(spool, max_bytes=1 << 20))
    try:
        yield writer, other
    finally:
        await writer.close()
        await other.close()


@pytest_asyncio.fixture(loop_scope="function")
async def restarted(tmp_path: Path) -> AsyncIterator[BufferedStore]:
    """A buffered store over a live SQLite store, started on a spool holding `SPOOLED`: saved
    while another connection held the store's write lock, by a store closed during the outage."""
    db, spool = tmp_path / "toolselect.db", tmp_path / "spool.db"
    inner = SqliteStore(db, busy_timeout=0.1)
    await inner.migrate()
    await inner.upsert_tools(TOOLS)
    with write_locked(db):
        before = BufferedStore(inner, spool=Spool.open(spool, max_bytes=1 << 20))
        assert await save_one(before, SPOOLED)
        assert before.down and before.backlog == 1
        await before.close()  # down: the spool is kept for the next start
    store = BufferedStore(SqliteStore(db), spool=Spool.open(spool, max_bytes=1 << 20))
    assert store.backlog == 1 and not store.down
    yield store
    await store.close()


async def test_a_tool_deleted_before_the_replay_takes_its_spooled_labels(
    restarted: BufferedStore,
) -> None:
    """A tool deleted while a label naming it waits in the spool, then put back: the label
    does not come back with it (a tool put back starts without labels)."""
    store = restarted
    assert await store.delete_tool("crypto_price")
    await store.upsert_tools(TOOLS)
    await store.flush()
    assert store.backlog == 0
    assert await store.exemplars_for_tool("crypto_price") == []
    assert await lookup_one(store, QUERY) is None


async def test_a_spooled_label_deleted_by_its_id_is_not_written_back(
    restarted: BufferedStore,
) -> None:
    """The id a spooled human label was answered with deletes it (not a 404 while it waits in
    the spool), and the replay does not write it afterwards."""
    store = restarted
    assert await store.delete_exemplar(SPOOLED.id)
    await store.flush()
    assert store.backlog == 0
    assert await lookup_one(store, QUERY) is None


async def test_the_replay_leaves_a_later_human_label_another_replica_saved(
    restarted: BufferedStore, tmp_path: Path
) -> None:
    """Another replica labels the request by hand after the spooled label was made: the replay
    leaves its label stored (the store's save decides it), logs the spooled one rejected as
    overtaken, and names the query for the live ranker to settle."""
    store = restarted
    other = SqliteStore(tmp_path / "toolselect.db")
    later = replace(SPOOLED, id="later", tool="get_weather", created_at=NOW + timedelta(minutes=1))
    assert await save_one(other, later)
    await other.close()
    with capture_logs() as logs:
        assert await store.flush() == 0
    rejected = [e for e in logs if e["event"] == "spooled_exemplar_rejected"]
    assert [(e["tool"], e["reason"]) for e in rejected] == [("crypto_price", "exemplar_overtaken")]
    stored = await lookup_one(store, QUERY)
    assert stored is not None and (stored.id, stored.tool) == ("later", "get_weather")
    assert store.unsettled == {SPOOLED.query_norm}


async def test_the_replay_replaces_an_earlier_human_label(
    restarted: BufferedStore, tmp_path: Path
) -> None:
    """A human label stored before the spooled one was made is replaced by it, as a live save
    would replace it: only a later word stands against a spooled one."""
    store = restarted
    other = SqliteStore(tmp_path / "toolselect.db")
    earlier = replace(SPOOLED, id="earlier", tool="get_weather", created_at=NOW - timedelta(1))
    assert await save_one(other, earlier)
    await other.close()
    await store.flush()
    stored = await lookup_one(store, QUERY)
    assert stored is not None and (stored.id, stored.tool) == ("spooled", "crypto_price")
    assert not store.unsettled


async def test_a_removal_replays_what_another_process_spooled_first(tmp_path: Path) -> None:
    """Workers of one `serve --workers` share the data folder's spool. A label one worker
    spooled in an outage, deleted by its id through another worker that had nothing spooled
    itself, is found (not a 404) and is not written back by the first worker's replay."""
    async with two_workers(tmp_path, TOOLS) as (writer, other):
        with write_locked(tmp_path / "toolselect.db"):
            assert await save_one(writer, SPOOLED)
            assert writer.down and writer.backlog == 1
        assert other.backlog == 0  # as this process last counted
        assert await other.delete_exemplar(SPOOLED.id)
        await writer.flush()
        assert await lookup_one(other, QUERY) is None
