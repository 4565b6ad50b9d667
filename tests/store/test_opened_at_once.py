"""Files several processes open at the same moment: `serve --workers N` starts N processes that
open the write spool together, and two workers may start the same new tenant's store at once.
Every one of them opens; before `use_wal`, about one open in eight failed with "database is
locked" (SQLite refuses the switch to WAL at once, without its busy timeout)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import sqlite3
import threading
import time
from multiprocessing.queues import Queue
from pathlib import Path

import pytest

from toolselect.config import Settings
from toolselect.sqlite_wal import use_wal
from toolselect.store.factory import open_store
from toolselect.store.spool import Spool

PROCESSES = 4
FILES = 8


def _open_spool(path: str) -> None:
    Spool.open(path, max_bytes=1 << 20).close()


def _open_store(path: str) -> None:
    async def go() -> None:
        store = await open_store(Settings(store=f"sqlite:{path}", embedder="hashing"))
        try:
            await store.migrate()
            await store.list_tools()
        finally:
            await store.close()

    asyncio.run(go())


def _opener(kind: str, path: str, start: float, answers: Queue[str]) -> None:
    while time.time() < start:  # every process past its start-up, then all at once
        pass
    try:
        (_open_spool if kind == "spool" else _open_store)(path)
        answers.put("ok")
    except Exception as exc:
        answers.put(repr(exc))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["spool", "store"])
def test_processes_opening_a_new_file_at_once_all_open_it(kind: str, tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    failures = []
    for i in range(FILES):
        answers: Queue[str] = context.Queue()
        start = time.time() + 0.3
        path = str(tmp_path / f"{kind}-{i}.db")
        procs = [
            context.Process(target=_opener, args=(kind, path, start, answers))
            for _ in range(PROCESSES)
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(60)
        failures += [a for a in (answers.get(timeout=5) for _ in procs) if a != "ok"]
    assert failures == []


def test_the_switch_waits_for_a_lock_another_connection_holds(tmp_path: Path) -> None:
    path = tmp_path / "held.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    waiter = sqlite3.connect(path, isolation_level=None, timeout=0)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        waiter.execute("PRAGMA journal_mode = WAL")  # what the stores did before
    release = threading.Timer(0.3, holder.execute, args=("COMMIT",))
    release.start()
    try:
        assert use_wal(waiter) == "wal"
    finally:
        release.join()
        waiter.close()
        holder.close()
    with contextlib.closing(sqlite3.connect(path)) as fresh:
        assert fresh.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_switch_gives_up_after_its_wait(tmp_path: Path) -> None:
    path = tmp_path / "held.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    waiter = sqlite3.connect(path, isolation_level=None, timeout=0)
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        use_wal(waiter, wait_s=0.2)
    assert time.monotonic() - started >= 0.2
    waiter.close()
    holder.close()
