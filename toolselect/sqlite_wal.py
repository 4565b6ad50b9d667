"""Switching a SQLite file to WAL, which several processes may do at once: the one way the
embedded store, the write spool and the vector cache open their files.

`serve --workers N` starts N processes that open the same new files (the spool, a tenant's store
on its first request in two workers) at the same moment. Switching a file to WAL needs a lock
that another connection may hold; SQLite then answers "database is locked" at once, without
waiting out the busy timeout (waiting could deadlock the two), so the switch is tried again for
a bounded time. Standard library only.
"""

from __future__ import annotations

import sqlite3
import time

WAL_WAIT_S = 10.0


def use_wal(conn: sqlite3.Connection, wait_s: float = WAL_WAIT_S) -> str:
    """`PRAGMA journal_mode = WAL` on `conn`, tried again for up to `wait_s` while the file is
    locked; the journal mode in effect after it (`wal`, or `memory` for an in-memory database)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
