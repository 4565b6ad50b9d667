"""`toolselect select` spawned beside other users of its data folder: a writer holding the
store, other spawns at once, a spawn killed mid-write. Real processes on real files."""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from tests.cli.test_cli import SELECT, run
from tests.services import cli_env


def test_select_reads_past_a_writer_holding_the_store(tmp_path: Path) -> None:
    """A writer in a transaction (a server saving labels, `tools import`) holds the store's
    write lock; the selector only reads, which WAL lets it do meanwhile. Its schema check took
    the write lock on every spawn, so it waited for the writer and, past the 5 s busy timeout,
    exited 1 ("database is locked") with no selection."""
    env = cli_env(tmp_path / "toolselect.db")
    first = run(["select"], env, stdin=json.dumps(SELECT))
    assert first.returncode == 0, first.stderr
    with closing(sqlite3.connect(tmp_path / "toolselect.db", isolation_level=None)) as writer:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE tools SET description = description")
        started = time.monotonic()
        done = run(["select"], env, stdin=json.dumps(SELECT))
        took = time.monotonic() - started
        writer.execute("ROLLBACK")
    assert done.returncode == 0, done.stderr
    assert done.stdout == first.stdout
    assert took < 5  # not the busy timeout: it never waited for the lock
