"""The embedded store: the `Store` contract on one SQLite file (stdlib `sqlite3`, WAL mode).

All SQLite work runs on one dedicated worker thread that owns the connection, so coroutines
never block the event loop, and the single writer serialises writes: versions are assigned in
`BEGIN IMMEDIATE` transactions and so stay monotonic (also across processes sharing the file).
The records and their semantics are the Neo4j store's; `tests/store` runs one suite on both.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence, Set
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import structlog

from toolselect.analytics.registry import finish, get_analysis
from toolselect.errors import StoreError, StoreUnavailable
from toolselect.graph import sqlite_analytics
from toolselect.graph.store import (
    AnalyticsResult,
    Exemplar,
    ExemplarDelta,
    OracleCall,
    Retention,
    SaveResult,
    StoredLabel,
    StoreState,
    Tool,
    Turn,
    UpsertResult,
    canonical_json,
    check_tier,
    last_per_name,
    last_per_query,
    lookup_one,
    pack_vector,
    plan_saves,
    save_one,
    unpack_vector,
)
from toolselect.names import normalise_query

T = TypeVar("T")
log = structlog.get_logger(__name__)

SCHEMA_VERSION = 1

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tools (
        name TEXT PRIMARY KEY, namespace TEXT NOT NULL, bare_name TEXT NOT NULL,
        description TEXT NOT NULL, input_schema TEXT NOT NULL, content_hash TEXT NOT NULL,
        updated_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS tool_packs (
        tool TEXT NOT NULL REFERENCES tools(name) ON DELETE CASCADE, pack TEXT NOT NULL,
        PRIMARY KEY (tool, pack))""",
    "CREATE INDEX IF NOT EXISTS tool_packs_pack ON tool_packs(pack)",
    """CREATE TABLE IF NOT EXISTS turns (
        id TEXT PRIMARY KEY, request TEXT NOT NULL, used_tool TEXT NOT NULL, at TEXT NOT NULL,
        agent_id TEXT, pack TEXT, outcome TEXT, top1 TEXT, margin REAL, flagged INTEGER NOT NULL,
        flag_reason TEXT, tier TEXT, label TEXT, result TEXT)""",
    "CREATE INDEX IF NOT EXISTS turns_at ON turns(at)",
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
    """CREATE TABLE IF NOT EXISTS meta (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        catalog_version INTEGER NOT NULL, exemplar_version INTEGER NOT NULL)""",
    """INSERT INTO meta (id, catalog_version, exemplar_version) VALUES (1, 0, 0)
        ON CONFLICT(id) DO NOTHING""",
)

_BUMP_CATALOG = "UPDATE meta SET catalog_version = catalog_version + 1 RETURNING catalog_version"
_BUMP_EXEMPLAR = (
    "UPDATE meta SET exemplar_version = exemplar_version + 1 RETURNING exemplar_version"
)
_UPSERT_TOOL = """
    INSERT INTO tools (name, namespace, bare_name, description, input_schema, content_hash,
        updated_at)
    VALUES (:name, :namespace, :bare_name, :description, :input_schema, :content_hash, :updated_at)
    ON CONFLICT(name) DO UPDATE SET namespace = excluded.namespace,
        bare_name = excluded.bare_name, description = excluded.description,
        input_schema = excluded.input_schema, content_hash = excluded.content_hash,
        updated_at = excluded.updated_at"""
_INSERT_TURN = """
    INSERT INTO turns (id, request, used_tool, at, agent_id, pack, outcome, top1, margin,
        flagged, flag_reason, tier, label, result)
    VALUES (:id, :request, :used_tool, :at, :agent_id, :pack, :outcome, :top1, :margin,
        :flagged, :flag_reason, :tier, :label, :result)
    ON CONFLICT(id) DO NOTHING"""
_UPDATE_TURN = """
    UPDATE turns SET request = :request, used_tool = :used_tool, at = :at, agent_id = :agent_id,
        pack = :pack, outcome = :outcome, top1 = :top1, margin = :margin, flagged = :flagged,
        flag_reason = :flag_reason, tier = :tier, label = :label, result = :result
    WHERE id = :id"""
_INSERT_EXEMPLAR = """
    INSERT INTO exemplars (id, query, query_norm, tool, tier, embedder, embedding, confidence,
        created_at, turn_id, version)
    VALUES (:id, :query, :query_norm, :tool, :tier, :embedder, :embedding, :confidence,
        :created_at, :turn_id, :version)"""
_UPSERT_CALL = """
    INSERT INTO oracle_calls (id, provider, model, result, latency_ms, at, turn_id, input_tokens,
        output_tokens, cost_usd, error)
    VALUES (:id, :provider, :model, :result, :latency_ms, :at, :turn_id, :input_tokens,
        :output_tokens, :cost_usd, :error)
    ON CONFLICT(id) DO UPDATE SET provider = excluded.provider, model = excluded.model,
        result = excluded.result, latency_ms = excluded.latency_ms, at = excluded.at,
        turn_id = excluded.turn_id, input_tokens = excluded.input_tokens,
        output_tokens = excluded.output_tokens, cost_usd = excluded.cost_usd,
        error = excluded.error"""
_TOMBSTONE = """
    INSERT INTO exemplar_tombstones (query_norm, version) VALUES (?, ?)
    ON CONFLICT(query_norm) DO UPDATE SET version = excluded.version"""
# Batches look keys up one by one on the worker thread (a cached statement, an index seek
# each): `IN (...)` lists would need SQL built from the batch size, and `json_each` arrays
# cut text at NUL characters.
_TOOL_EXISTS = "SELECT 1 FROM tools WHERE name = ?"
_LABEL_OF_QUERY = "SELECT tool, tier FROM exemplars WHERE query_norm = ?"
_EXEMPLAR_OF_QUERY = "SELECT * FROM exemplars WHERE query_norm = ?"
# Retention, in order: expired, beyond the tool's cap, beyond the total (newest kept).
_EXPIRED = "SELECT query_norm FROM exemplars WHERE tier != 'feedback' AND created_at < ?"
_BEYOND_TOOL_CAP = """
    SELECT query_norm FROM exemplars WHERE tool = ? AND tier != 'feedback'
    ORDER BY created_at DESC, version DESC, id DESC LIMIT -1 OFFSET ?"""
_BEYOND_TOTAL_CAP = """
    SELECT query_norm FROM exemplars WHERE tier != 'feedback'
    ORDER BY created_at DESC, version DESC, id DESC LIMIT -1 OFFSET ?"""

# Primary result codes meaning "cannot reach the data now" rather than "refused the operation".
_UNAVAILABLE_CODES = {5, 6, 10, 13, 14, 15, 26}  # BUSY LOCKED IOERR FULL CANTOPEN PROTOCOL NOTADB
_UNAVAILABLE_WORDS = ("locked", "busy", "disk i/o", "unable to open", "disk is full")
_NO_STATE = "sqlite store has no state record; run migrate() first"


def _fields(record: Any) -> dict[str, Any]:
    """A record's fields as a flat dict; unlike `asdict` it does not deep-copy the values (an
    exemplar's embedding is thousands of floats)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _ts(value: datetime) -> str:
    """Fixed-width ISO-8601 UTC text, so text order is time order (naive means UTC)."""
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return aware.isoformat(timespec="microseconds")


def _dt(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def _translate(exc: sqlite3.Error, path: Path) -> StoreError:
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and (
        (code is not None and code & 0xFF in _UNAVAILABLE_CODES)
        or any(word in text.lower() for word in _UNAVAILABLE_WORDS)
    ):
        return StoreUnavailable(f"sqlite store {path} is unavailable: {text}")
    return StoreError(f"sqlite store {path} refused the operation: {text}")


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
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


def _bump(conn: sqlite3.Connection, statement: str) -> int:
    row = conn.execute(statement).fetchone()
    if row is None:
        raise StoreError(_NO_STATE)
    return int(row[0])


def _row(conn: sqlite3.Connection, sql: str, key: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(sql, (key,)).fetchone()
    return row


def _tombstone(conn: sqlite3.Connection, query_norms: Sequence[str]) -> None:
    """Record removed queries under one fresh exemplar version."""
    version = _bump(conn, _BUMP_EXEMPLAR)
    conn.executemany(_TOMBSTONE, [(qn, version) for qn in query_norms])


def _exemplar_params(exemplar: Exemplar) -> dict[str, Any]:
    return _fields(exemplar) | {
        "query_norm": exemplar.query_norm,
        "embedding": pack_vector(exemplar.embedding),
        "created_at": _ts(exemplar.created_at),
    }


def _tool(row: sqlite3.Row, packs: Sequence[str]) -> Tool:
    schema = json.loads(row["input_schema"])
    return Tool(row["name"], row["description"], schema, tuple(sorted(packs)))


def _turn_params(turn: Turn) -> dict[str, Any]:
    return _fields(turn) | {"at": _ts(turn.at), "flagged": int(turn.flagged)}


def _turn(row: sqlite3.Row) -> Turn:
    fields = dict(row)
    return Turn(**fields | {"at": _dt(row["at"]), "flagged": bool(row["flagged"])})


def _exemplar(row: sqlite3.Row) -> Exemplar:
    fields = dict(row)
    del fields["query_norm"]
    return Exemplar(
        **fields
        | {"embedding": unpack_vector(row["embedding"]), "created_at": _dt(row["created_at"])}
    )


def _call(row: sqlite3.Row) -> OracleCall:
    return OracleCall(**dict(row) | {"at": _dt(row["at"])})


class SqliteStore:
    """The `Store` on a local SQLite file; one instance per process is the intended use.

    `busy_timeout` is how long (seconds) a write waits for another process's lock before the
    call raises `StoreUnavailable`.
    """

    def __init__(
        self,
        path: Path,
        *,
        retention: Retention | None = None,
        clock: Callable[[], datetime] = _utc_now,
        busy_timeout: float = 5.0,
    ) -> None:
        self._path = Path(path)
        self._busy_timeout = busy_timeout
        self._retention = retention or Retention()
        self._clock = clock
        # No thread starts until the first submit: construction does no I/O.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolselect-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    @property
    def uri(self) -> str:
        return f"sqlite:{self._path}"

    # --- plumbing -------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreUnavailable(f"cannot create the folder of {self._path}: {exc}") from exc
            conn = sqlite3.connect(self._path, isolation_level=None, timeout=self._busy_timeout)
            try:
                conn.row_factory = sqlite3.Row
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("PRAGMA foreign_keys=ON")
            except sqlite3.Error:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _work(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Runs on the worker thread: open lazily, run, translate sqlite3 errors."""
        try:
            return fn(self._connection())
        except sqlite3.Error as exc:
            raise _translate(exc, self._path) from exc

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreError(f"sqlite store {self._path} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._work, fn)

    # --- lifecycle ------------------------------------------------------------------------

    async def migrate(self) -> None:
        def work(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")

        await self._run(work)
        log.info("store_migrated", store=self.uri, schema_version=SCHEMA_VERSION)

    async def ping(self) -> None:
        await self._run(lambda conn: conn.execute("SELECT 1").fetchone())

    async def state(self) -> StoreState:
        def work(conn: sqlite3.Connection) -> StoreState:
            row = conn.execute("SELECT catalog_version, exemplar_version FROM meta").fetchone()
            if row is None:
                raise StoreError(_NO_STATE)
            return StoreState(catalog_version=row[0], exemplar_version=row[1])

        return await self._run(work)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        def work() -> None:
            # Queued after any work still running, on the thread that owns the connection.
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, work)
        finally:
            # The thread is idle now (its last job was awaited above), so joining it is
            # immediate; a joined thread means nothing of the store outlives close().
            self._executor.shutdown(wait=True)

    # --- tools ----------------------------------------------------------------------------

    async def upsert_tools(self, tools: Sequence[Tool], pack: str | None = None) -> UpsertResult:
        rows = [
            {
                "name": t.name,
                "namespace": t.namespace,
                "bare_name": t.bare_name,
                "description": t.description,
                "input_schema": canonical_json(t.input_schema),
                "content_hash": t.content_hash,
            }
            for t in last_per_name(tools)
        ]

        def work(conn: sqlite3.Connection) -> UpsertResult:
            upserted = unchanged = 0
            changed = False
            now = _ts(self._clock())
            with _transaction(conn):
                for row in rows:
                    stored = conn.execute(
                        "SELECT content_hash FROM tools WHERE name = ?", (row["name"],)
                    ).fetchone()
                    if stored is not None and stored[0] == row["content_hash"]:
                        unchanged += 1
                    else:
                        conn.execute(_UPSERT_TOOL, row | {"updated_at": now})
                        upserted += 1
                        changed = True
                    if pack is not None:
                        added = conn.execute(
                            "INSERT INTO tool_packs (tool, pack) VALUES (?, ?) "
                            "ON CONFLICT(tool, pack) DO NOTHING",
                            (row["name"], pack),
                        )
                        changed = changed or added.rowcount > 0
                if changed:
                    _bump(conn, _BUMP_CATALOG)
            return UpsertResult(upserted=upserted, unchanged=unchanged)

        return await self._run(work)

    async def list_tools(self, pack: str | None = None) -> list[Tool]:
        def work(conn: sqlite3.Connection) -> list[Tool]:
            if pack is None:
                rows = conn.execute("SELECT * FROM tools ORDER BY name").fetchall()
            else:
                rows = conn.execute(
                    "SELECT t.* FROM tools t JOIN tool_packs p ON p.tool = t.name "
                    "WHERE p.pack = ? ORDER BY t.name",
                    (pack,),
                ).fetchall()
            packs: dict[str, list[str]] = {}
            for tool, member in conn.execute("SELECT tool, pack FROM tool_packs"):
                packs.setdefault(tool, []).append(member)
            return [_tool(row, packs.get(row["name"], [])) for row in rows]

        return await self._run(work)

    async def get_tool(self, name: str) -> Tool | None:
        def work(conn: sqlite3.Connection) -> Tool | None:
            row = conn.execute("SELECT * FROM tools WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None
            packs = conn.execute("SELECT pack FROM tool_packs WHERE tool = ?", (name,))
            return _tool(row, [p[0] for p in packs])

        return await self._run(work)

    async def delete_tool(self, name: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            with _transaction(conn):
                if conn.execute("SELECT 1 FROM tools WHERE name = ?", (name,)).fetchone() is None:
                    return False
                gone = conn.execute(
                    "DELETE FROM exemplars WHERE tool = ? RETURNING query_norm", (name,)
                ).fetchall()
                if gone:
                    _tombstone(conn, [row[0] for row in gone])
                conn.execute("DELETE FROM tool_packs WHERE tool = ?", (name,))
                conn.execute("DELETE FROM tools WHERE name = ?", (name,))
                _bump(conn, _BUMP_CATALOG)
            return True

        return await self._run(work)

    # --- turns ----------------------------------------------------------------------------

    async def record_turns(self, turns: Sequence[Turn]) -> int:
        rows = [_turn_params(t) for t in turns]
        if not rows:
            return 0

        def work(conn: sqlite3.Connection) -> int:
            with _transaction(conn):
                # The insert counts new ids (a repeat inside the batch counts once); the update
                # then applies every version in order, so the last one sent wins.
                inserted = conn.executemany(_INSERT_TURN, rows).rowcount
                conn.executemany(_UPDATE_TURN, rows)
            return max(inserted, 0)

        return await self._run(work)

    async def get_turn(self, turn_id: str) -> Turn | None:
        def work(conn: sqlite3.Connection) -> Turn | None:
            row = conn.execute("SELECT * FROM turns WHERE id = ?", (turn_id,)).fetchone()
            return None if row is None else _turn(row)

        return await self._run(work)

    # --- exemplars ------------------------------------------------------------------------

    async def save_exemplars(self, exemplars: Sequence[Exemplar]) -> SaveResult:
        for exemplar in exemplars:
            check_tier(exemplar)
        if not exemplars:
            return SaveResult()
        keys = sorted({e.query_norm for e in exemplars})
        names = sorted({e.tool for e in exemplars})

        def work(conn: sqlite3.Connection) -> tuple[SaveResult, int]:
            with _transaction(conn):
                known = {name for name in names if _row(conn, _TOOL_EXISTS, name) is not None}
                stored = {
                    key: StoredLabel(row["tool"], row["tier"])
                    for key in keys
                    if (row := _row(conn, _LABEL_OF_QUERY, key)) is not None
                }
                changing, unknown = plan_saves(exemplars, stored, known)
                if not changing:
                    return SaveResult(unknown_tool=tuple(unknown)), 0
                version = _bump(conn, _BUMP_EXEMPLAR)
                written = last_per_query(changing)
                rows = [(e.query_norm,) for e in written]
                conn.executemany("DELETE FROM exemplars WHERE query_norm = ?", rows)
                conn.executemany(
                    _INSERT_EXEMPLAR, [_exemplar_params(e) | {"version": version} for e in written]
                )
                # The upsert supersedes an earlier removal of the same query.
                conn.executemany("DELETE FROM exemplar_tombstones WHERE query_norm = ?", rows)
                evicted = self._enforce_retention(conn, {e.tool for e in written}, version)
            changed = tuple(replace(e, version=version) for e in changing)
            return SaveResult(changed, tuple(unknown), evicted), evicted

        result, evicted = await self._run(work)
        if evicted:
            log.info("exemplars_evicted", store=self.uri, count=evicted)
        return result

    async def save_exemplar(self, exemplar: Exemplar) -> bool:
        return await save_one(self, exemplar)

    def _enforce_retention(self, conn: sqlite3.Connection, tools: Set[str], version: int) -> int:
        """Evict non-feedback exemplars: expired, then beyond each written tool's cap, then the
        total; the tombstones carry the batch's `version`."""
        limits = self._retention
        cutoff = _ts(self._clock() - timedelta(days=limits.max_age_days))
        selections: list[tuple[str, tuple[Any, ...]]] = [(_EXPIRED, (cutoff,))]
        selections += [
            (_BEYOND_TOOL_CAP, (tool, max(limits.per_tool, 0))) for tool in sorted(tools)
        ]
        selections.append((_BEYOND_TOTAL_CAP, (max(limits.total, 0),)))
        victims: list[str] = []
        for sql, args in selections:
            found = [row[0] for row in conn.execute(sql, args)]
            conn.executemany("DELETE FROM exemplars WHERE query_norm = ?", [(q,) for q in found])
            victims.extend(found)
        conn.executemany(_TOMBSTONE, [(qn, version) for qn in victims])
        return len(victims)

    async def exemplars_for_queries(self, queries: Sequence[str]) -> dict[str, Exemplar]:
        keys = sorted({normalise_query(q) for q in queries})
        if not keys:
            return {}

        def work(conn: sqlite3.Connection) -> dict[str, Exemplar]:
            return {
                key: _exemplar(row)
                for key in keys
                if (row := _row(conn, _EXEMPLAR_OF_QUERY, key)) is not None
            }

        return await self._run(work)

    async def exemplar_for_query(self, query: str) -> Exemplar | None:
        return await lookup_one(self, query)

    async def exemplars_for_tool(self, tool: str) -> list[Exemplar]:
        def work(conn: sqlite3.Connection) -> list[Exemplar]:
            rows = conn.execute(
                "SELECT * FROM exemplars WHERE tool = ? "
                "ORDER BY created_at DESC, version DESC, id DESC",
                (tool,),
            )
            return [_exemplar(row) for row in rows]

        return await self._run(work)

    async def exemplars_since(self, version: int) -> ExemplarDelta:
        def work(conn: sqlite3.Connection) -> ExemplarDelta:
            # One read transaction, so the delta and its version describe the same snapshot.
            conn.execute("BEGIN")
            try:
                current = conn.execute("SELECT exemplar_version FROM meta").fetchone()
                upserted = conn.execute(
                    "SELECT * FROM exemplars WHERE version > ? ORDER BY version", (version,)
                ).fetchall()
                deleted = conn.execute(
                    "SELECT query_norm FROM exemplar_tombstones WHERE version > ? "
                    "ORDER BY version, query_norm",
                    (version,),
                ).fetchall()
            finally:
                conn.execute("COMMIT")
            if current is None:
                raise StoreError(_NO_STATE)
            return ExemplarDelta(
                version=int(current[0]),
                upserted=tuple(_exemplar(row) for row in upserted),
                deleted=tuple(row[0] for row in deleted),
            )

        return await self._run(work)

    async def delete_exemplar(self, exemplar_id: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            with _transaction(conn):
                row = conn.execute(
                    "DELETE FROM exemplars WHERE id = ? RETURNING query_norm", (exemplar_id,)
                ).fetchone()
                if row is None:
                    return False
                _tombstone(conn, [row[0]])
            return True

        return await self._run(work)

    # --- oracle calls ---------------------------------------------------------------------

    async def record_oracle_call(self, call: OracleCall) -> None:
        params = _fields(call) | {"at": _ts(call.at)}

        def work(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.execute(_UPSERT_CALL, params)

        await self._run(work)

    async def oracle_calls(self, turn_id: str | None = None) -> list[OracleCall]:
        def work(conn: sqlite3.Connection) -> list[OracleCall]:
            if turn_id is None:
                rows = conn.execute("SELECT * FROM oracle_calls ORDER BY at, rowid")
            else:
                rows = conn.execute(
                    "SELECT * FROM oracle_calls WHERE turn_id = ? ORDER BY at, rowid", (turn_id,)
                )
            return [_call(row) for row in rows]

        return await self._run(work)

    # --- analytics ------------------------------------------------------------------------

    async def analytics(self, name: str, since: datetime | None = None) -> AnalyticsResult:
        """One analysis of `cypher/analytics/`, in SQL (`sqlite_analytics`), finished alike."""
        get_analysis(name)  # NotFound before any I/O
        since_text = None if since is None else _ts(since)
        rows = await self._run(lambda conn: sqlite_analytics.raw_rows(conn, name, since_text))
        return finish(name, rows)
