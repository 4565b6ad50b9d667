"""The SQLite store's file: how it is opened, its tables, how times are written in them, and the
transaction and version-counter primitives every operation of the store runs on.

Functions here run on the store's worker thread, on the connection it owns.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from toolselect.errors import StoreError, StoreUnavailable
from toolselect.sqlite_wal import cannot_write, is_read_only, open_read_only, use_wal
from toolselect.store.sqlite.sessions import SCHEMA as SESSIONS_SCHEMA
from toolselect.store.sqlite.times import dt as dt
from toolselect.store.sqlite.times import ts as ts

SCHEMA_VERSION = 3

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tools (
        name TEXT PRIMARY KEY, namespace TEXT NOT NULL, bare_name TEXT NOT NULL,
        description TEXT NOT NULL, input_schema TEXT NOT NULL, content_hash TEXT NOT NULL,
        updated_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS tool_packs (
        tool TEXT NOT NULL REFERENCES tools(name) ON DELETE CASCADE, pack TEXT NOT NULL,
        PRIMARY KEY (tool, pack))""",
    "CREATE INDEX IF NOT EXISTS tool_packs_pack ON tool_packs(pack)",
    "CREATE INDEX IF NOT EXISTS tools_bare_name ON tools(bare_name)",
    """CREATE TABLE IF NOT EXISTS turns (
        id TEXT PRIMARY KEY, request TEXT NOT NULL, used_tool TEXT NOT NULL, at TEXT NOT NULL,
        agent_id TEXT, pack TEXT, outcome TEXT, top1 TEXT, margin REAL, flagged INTEGER NOT NULL,
        flag_reason TEXT, tier TEXT, label TEXT, result TEXT)""",
    # Version 2 columns are added by `_ADDED` (so files of version 1 get them too).
    "CREATE INDEX IF NOT EXISTS turns_at ON turns(at)",
    # What `undecided_turns` reads: a few turns among all, by time.
    "CREATE INDEX IF NOT EXISTS turns_undecided ON turns(at) WHERE tier = 'teacher' AND result IS NULL",
    # What `refused_turns` reads at a start: the few turns a spent teacher budget refused.
    "CREATE INDEX IF NOT EXISTS turns_refused ON turns(at) WHERE result = 'limit_reached'",
    """CREATE TABLE IF NOT EXISTS exemplars (
        id TEXT NOT NULL UNIQUE, query TEXT NOT NULL, query_norm TEXT NOT NULL UNIQUE,
        tool TEXT NOT NULL REFERENCES tools(name), tier TEXT NOT NULL, embedder TEXT NOT NULL,
        embedding BLOB NOT NULL, confidence REAL NOT NULL, created_at TEXT NOT NULL,
        turn_id TEXT, version INTEGER NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS exemplars_tool ON exemplars(tool, created_at)",
    "CREATE INDEX IF NOT EXISTS exemplars_created ON exemplars(created_at)",
    "CREATE INDEX IF NOT EXISTS exemplars_version ON exemplars(version)",
    """CREATE TABLE IF NOT EXISTS exemplar_tombstones (
        query_norm TEXT PRIMARY KEY, version INTEGER NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS tombstones_version ON exemplar_tombstones(version)",
    """CREATE TABLE IF NOT EXISTS oracle_calls (
        id TEXT PRIMARY KEY, provider TEXT NOT NULL, model TEXT NOT NULL, result TEXT NOT NULL,
        latency_ms REAL NOT NULL, at TEXT NOT NULL, turn_id TEXT, input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL, cost_usd REAL NOT NULL, error TEXT)""",
    "CREATE INDEX IF NOT EXISTS oracle_calls_turn ON oracle_calls(turn_id, at)",
    # The teacher budget's last hour at a start; the calls retention deletes.
    "CREATE INDEX IF NOT EXISTS oracle_calls_at ON oracle_calls(at)",
    """CREATE TABLE IF NOT EXISTS meta (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        catalog_version INTEGER NOT NULL, exemplar_version INTEGER NOT NULL)""",
    """INSERT INTO meta (id, catalog_version, exemplar_version) VALUES (1, 0, 0)
        ON CONFLICT(id) DO NOTHING""",
    # API keys (`toolselect.keys`): the SHA-256 of each key, never the key.
    """CREATE TABLE IF NOT EXISTS api_keys (
        id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, prefix TEXT NOT NULL,
        tenant TEXT NOT NULL, role TEXT NOT NULL, name TEXT, created_at TEXT NOT NULL,
        revoked_at TEXT)""",
    "CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys(tenant, created_at)",
)

# Columns added after version 1: (table, column, type), added where missing.
_ADDED = (
    ("turns", "session_id", "TEXT"),
    ("turns", "used_tools", "TEXT"),
    ("turns", "search_id", "TEXT"),
    ("turns", "search_status", "TEXT"),
    ("turns", "shown_position", "INTEGER"),
    ("turns", "shown_k", "INTEGER"),
    ("turns", "reason", "TEXT"),
    ("exemplars", "count", "INTEGER NOT NULL DEFAULT 1"),
    # Version 3: when a tool count was last counted, which retention keeps first among ties.
    ("tool_pairs", "seen", "TEXT"),
    ("tool_transitions", "seen", "TEXT"),
)

BUMP_CATALOG = "UPDATE meta SET catalog_version = catalog_version + 1 RETURNING catalog_version"
BUMP_EXEMPLAR = "UPDATE meta SET exemplar_version = exemplar_version + 1 RETURNING exemplar_version"
NO_STATE = "sqlite store has no state record; run migrate() first"

# Primary result codes meaning "cannot reach the data now" rather than "refused the operation".
_UNAVAILABLE_CODES = {5, 6, 10, 13, 14, 15, 26}  # BUSY LOCKED IOERR FULL CANTOPEN PROTOCOL NOTADB
_UNAVAILABLE_WORDS = ("locked", "busy", "disk i/o", "unable to open", "disk is full")


def translate(exc: sqlite3.Error, path: Path) -> StoreError:
    """A `sqlite3` error as the store raises it: `StoreUnavailable` when the file cannot be
    reached now (locked, busy, I/O), `StoreError` otherwise."""
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and (
        (code is not None and code & 0xFF in _UNAVAILABLE_CODES)
        or any(word in text.lower() for word in _UNAVAILABLE_WORDS)
    ):
        return StoreUnavailable(f"sqlite store {path} is unavailable: {text}")
    return StoreError(f"sqlite store {path} refused the operation: {text}")


def connect(path: Path, busy_timeout: float, *, read_only_fallback: bool) -> sqlite3.Connection:
    """The store's connection on `path` (its folder made first): WAL, autocommit, rows as
    `sqlite3.Row`; read-only where `read_only_fallback` and this process cannot write it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreUnavailable(f"cannot create the folder of {path}: {exc}") from exc
    if read_only_fallback and cannot_write(path):
        conn = open_read_only(path, timeout=busy_timeout)
    else:
        conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout)
        try:
            use_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error:
            conn.close()
            raise
    conn.row_factory = sqlite3.Row
    return conn


def create(conn: sqlite3.Connection, *, reader: bool = False) -> None:
    """Create the tables, indexes and the state record; idempotent. On a read-only connection
    only check that they are there: a reader cannot add them (`StoreError` when missing). A
    `reader` (the exec selector) that finds them there does the same: the write transaction
    would take the write lock, and wait out (or fail on) a writer that holds it."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if reader and version >= SCHEMA_VERSION:
        return
    if is_read_only(conn):
        if version < SCHEMA_VERSION:
            where = conn.execute("PRAGMA database_list").fetchone()[2]
            raise StoreError(
                f"sqlite store {where} is read-only and at schema version {version}, this "
                f"version reads {SCHEMA_VERSION}: open it once where it can be written "
                "(toolselect serve or tools import) to upgrade it"
            )
        return
    with transaction(conn):
        for statement in _SCHEMA + SESSIONS_SCHEMA:
            conn.execute(statement)
        for table, column, kind in _ADDED:
            present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction; IMMEDIATE takes the write lock first, so version reads are safe."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        # Some errors (disk full, I/O) end the transaction themselves; don't mask them.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def bump(conn: sqlite3.Connection, statement: str) -> int:
    """Move one version counter (`BUMP_CATALOG`, `BUMP_EXEMPLAR`); the new value."""
    row = conn.execute(statement).fetchone()
    if row is None:
        raise StoreError(NO_STATE)
    return int(row[0])
