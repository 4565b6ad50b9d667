"""Behaviour only the embedded SQLite store has: lazy files, WAL, error translation, closing."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from toolselect.errors import StoreError, StoreUnavailable
from toolselect.records import Tool
from toolselect.store.port import lookup_one
from toolselect.store.sqlite.schema import SCHEMA_VERSION
from toolselect.store.sqlite.store import SqliteStore


async def test_construction_does_no_io_and_first_use_creates_folders(tmp_path: Path) -> None:
    """Building a store touches nothing; migrate creates the missing folders and the file."""
    path = tmp_path / "deep" / "er" / "store.db"
    store = SqliteStore(path)
    assert not path.parent.exists()
    assert store.uri == f"sqlite:{path}"
    try:
        await store.migrate()
        assert path.is_file()
    finally:
        await store.close()


async def test_exists_is_the_tenant_file_and_asking_makes_none(tmp_path: Path) -> None:
    """`exists` is whether the tenant's file is there, and asking does not make it; on
    `:memory:`, whether the store opened its private database."""
    path = tmp_path / "store.db"
    team = SqliteStore(path, tenant="team-x")
    try:
        assert not await team.exists()
        assert not (tmp_path / "store.tenant-team-x.db").exists()
        await team.migrate()
        assert await team.exists()
        assert (tmp_path / "store.tenant-team-x.db").is_file()
    finally:
        await team.close()
    memory = SqliteStore(Path(":memory:"))
    try:
        assert not await memory.exists()
        await memory.migrate()
        assert await memory.exists()
    finally:
        await memory.close()


async def test_database_runs_in_wal_mode(tmp_path: Path) -> None:
    """The file is switched to write-ahead logging, so readers never wait for the writer."""
    store = SqliteStore(tmp_path / "store.db")
    await store.migrate()
    await store.close()
    with sqlite3.connect(tmp_path / "store.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_unopenable_path_is_unavailable(tmp_path: Path) -> None:
    """A path that cannot hold a database raises StoreUnavailable from ping, not sqlite3 errors."""
    (tmp_path / "file").write_text("not a folder")
    store = SqliteStore(tmp_path / "file" / "store.db")
    try:
        with pytest.raises(StoreUnavailable):
            await store.ping()
    finally:
        await store.close()


async def test_directory_path_is_unavailable(tmp_path: Path) -> None:
    """A folder in place of the database file raises StoreUnavailable naming the path."""
    store = SqliteStore(tmp_path)
    try:
        with pytest.raises(StoreUnavailable, match="sqlite store"):
            await store.ping()
    finally:
        await store.close()


async def test_unmigrated_store_raises_store_error(tmp_path: Path) -> None:
    """Using a store whose tables were never created raises StoreError, not sqlite3.Error."""
    store = SqliteStore(tmp_path / "store.db")
    try:
        with pytest.raises(StoreError) as caught:
            await store.state()
        assert not isinstance(caught.value, StoreUnavailable)
        assert isinstance(caught.value.__cause__, sqlite3.Error)
    finally:
        await store.close()


async def test_locked_database_is_unavailable(tmp_path: Path) -> None:
    """A write lock held elsewhere past the busy timeout surfaces as StoreUnavailable."""
    path = tmp_path / "store.db"
    store = SqliteStore(path, busy_timeout=0.2)
    await store.migrate()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailable, match="locked"):
            await store.upsert_tools([Tool("blocked")])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        await store.close()


async def test_closed_store_refuses_work_and_close_is_idempotent(tmp_path: Path) -> None:
    """After close every call raises StoreError, and closing again is harmless."""
    store = SqliteStore(tmp_path / "store.db")
    await store.migrate()
    await store.close()
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.state()


async def test_event_loop_keeps_running_during_store_work(tmp_path: Path) -> None:
    """A large write runs off the event loop: a ticking coroutine advances while it runs."""
    store = SqliteStore(tmp_path / "store.db")
    await store.migrate()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    try:
        await store.upsert_tools([Tool(f"tool{i}", "x" * 200) for i in range(3000)])
    finally:
        ticker.cancel()
        await store.close()
    assert ticks > 10


async def test_a_version_1_file_gains_the_new_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    """A file written before search ids and usage counts migrates in place: its turns and
    exemplars read back, with the new fields empty and every count 1."""
    path = tmp_path / "store.db"
    store = SqliteStore(path)
    await store.migrate()
    await store.upsert_tools([Tool("t", "does t")])
    await store.close()
    with sqlite3.connect(path) as conn:  # back to version 1's tables
        for table, column in [("turns", c) for c in ("session_id", "used_tools", "search_id",
                              "search_status", "shown_position", "shown_k")] + [
                              ("exemplars", "count"), ("tool_pairs", "seen"),
                              ("tool_transitions", "seen")]:  # fmt: skip
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        conn.execute(
            "INSERT INTO turns (id, request, used_tool, at, flagged) VALUES "
            "('old', 'q', 't', '2026-01-01T00:00:00.000000+00:00', 0)"
        )
        conn.execute(
            "INSERT INTO exemplars (id, query, query_norm, tool, tier, embedder, embedding, "
            "confidence, created_at, version) VALUES ('e', 'Q', 'q', 't', 'teacher', 'h', "
            "x'0000803f', 1.0, '2026-01-01T00:00:00.000000+00:00', 1)"
        )
        conn.execute("PRAGMA user_version = 1")
    store = SqliteStore(path)
    try:
        await store.migrate()
        turn = await store.get_turn("old")
        assert turn is not None and (turn.search_id, turn.used_tools) == (None, ())
        found = await lookup_one(store, "q")
        assert found is not None and (found.tier, found.count, found.embedding) == (
            "teacher", 1, (1.0,),
        )  # fmt: skip
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert "seen" in {row[1] for row in conn.execute("PRAGMA table_info(tool_pairs)")}
