"""Switching a SQLite file to WAL, which several processes may do at once, and reading one
that cannot be written: the one way the embedded store, the write spool and the vector cache
open their files.

`serve --workers N` starts N processes that open the same new files (the spool, a tenant's store
on its first request in two workers) at the same moment. Switching a file to WAL needs a lock
that another connection may hold; SQLite then answers "database is locked" at once, without
waiting out the busy timeout (waiting could deadlock the two), so the switch is tried again for
a bounded time. Standard library only.

A reader (the exec selector) may be given a data folder it cannot write: mounted read-only in a
container, or another user's files. SQLite's usual open then fails on the first read, because a
WAL reader needs the `-shm` index, which it cannot create there. `open_read_only` reads such a
file as SQLite's WAL documentation allows: with `mode=ro` when the `-shm` is there (a writer has
the file open, and its `-wal` holds commits the main file lacks), and as `immutable=1` when there
is neither `-shm` nor `-wal`, so the main file is the whole database. An immutable reader takes
no locks: a writer that starts meanwhile can make its reads fail, which a short-lived reader may
risk and a long-lived one should not.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

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


def cannot_write(path: Path) -> bool:
    """Whether `path` exists and this process cannot write it or create its `-wal` and `-shm`
    beside it. A missing file is not read-only: opening it creates it, or fails as it always
    did."""
    # access(2) asks the kernel, so a read-only mount, an immutable file and a root without
    # CAP_DAC_OVERRIDE count as well as the mode bits.
    return path.is_file() and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))


def open_read_only(
    path: Path, *, timeout: float, check_same_thread: bool = True
) -> sqlite3.Connection:
    """A connection that only reads `path` (autocommit), whether or not its folder can be
    written; `is_read_only` tells it from another. sqlite3 errors as `sqlite3.connect` raises
    them (a missing file: "unable to open database file")."""
    uri = f"{path.absolute().as_uri()}?mode=ro"
    conn = _read_only(uri, timeout, check_same_thread)
    try:
        # The first read opens the WAL index: where it fails, nothing was read yet.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:
        conn.close()
        wal, shm = (Path(f"{path}{suffix}") for suffix in ("-wal", "-shm"))
        # With a -wal left over the main file lacks its commits, and an immutable reader never
        # looks at the -wal: refusing is better than answering from stale data.
        if wal.exists() or shm.exists():
            raise
        conn = _read_only(f"{uri}&immutable=1", timeout, check_same_thread)
    return conn


def _read_only(uri: str, timeout: float, check_same_thread: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(
        uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=check_same_thread
    )
    # mode=ro already refuses writes; query_only is the mark `is_read_only` reads back.
    conn.execute("PRAGMA query_only = ON")
    return conn


def is_read_only(conn: sqlite3.Connection) -> bool:
    """Whether `conn` came from `open_read_only`."""
    return bool(conn.execute("PRAGMA query_only").fetchone()[0])
