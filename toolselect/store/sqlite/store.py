"""The embedded store: the `Store` contract on one SQLite file (stdlib `sqlite3`, WAL mode).

All SQLite work runs on one dedicated worker thread that owns the connection, so coroutines
never block the event loop, and the single writer serialises writes: versions are assigned in
`BEGIN IMMEDIATE` transactions and so stay monotonic (also across processes sharing the file).
The records and their semantics are the Neo4j store's; `tests/store` runs one suite on both.

Tenants are isolated physically: one file per tenant (`keys.tenant_file`). The `default`
tenant's is the configured path itself, so a file written before tenants existed is the
`default` tenant's as it is; tenant `t` lives next to it in `<stem>.tenant-<t><suffix>` (`toolselect.db` ->
`toolselect.tenant-acme.db`), and on `:memory:` every store has a private database anyway. API
keys are not a tenant's data: they live in the `default` tenant's file only.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TypeVar

import structlog

from toolselect.analytics.registry import finish, get_analysis
from toolselect.clock import Clock, utc_now
from toolselect.errors import StoreError
from toolselect.keys import DEFAULT_TENANT, check_tenant, key_from_row, key_row, tenant_file
from toolselect.names import DEFAULT_FALLBACK_TOOLS, normalise_query
from toolselect.records import (
    BUDGET_SPENT,
    AnalyticsResult,
    ApiKey,
    Exemplar,
    ExemplarDelta,
    OracleCall,
    Retention,
    SaveResult,
    StoreState,
    Tool,
    Turn,
    TurnsDeleted,
    UpsertResult,
)
from toolselect.store.rules import (
    call_from_row,
    call_row,
    check_key_tenant,
    check_tiers,
    last_per_name,
    tool_from_row,
    tool_row,
    turn_from_row,
    turn_row,
)
from toolselect.store.session_rules import SessionTail
from toolselect.store.sqlite import analytics as sqlite_analytics
from toolselect.store.sqlite import exemplars as sqlite_exemplars
from toolselect.store.sqlite import schema as sqlite_schema
from toolselect.store.sqlite import sessions as sqlite_sessions
from toolselect.store.sqlite import turns as sql
from toolselect.store.sqlite.schema import (
    BUMP_CATALOG,
    NO_STATE,
    bump,
    dt,
    transaction,
    translate,
    ts,
)

T = TypeVar("T")
log = structlog.get_logger(__name__)

_UPSERT_TOOL = """
    INSERT INTO tools (name, namespace, bare_name, description, input_schema, content_hash,
        updated_at)
    VALUES (:name, :namespace, :bare_name, :description, :input_schema, :content_hash, :updated_at)
    ON CONFLICT(name) DO UPDATE SET namespace = excluded.namespace,
        bare_name = excluded.bare_name, description = excluded.description,
        input_schema = excluded.input_schema, content_hash = excluded.content_hash,
        updated_at = excluded.updated_at"""
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
_INSERT_KEY = """
    INSERT INTO api_keys (id, hash, prefix, tenant, role, name, created_at, revoked_at)
    VALUES (:id, :hash, :prefix, :tenant, :role, :name, :created_at, :revoked_at)"""
_REVOKE_KEY = "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?"
_LIST_KEYS = "SELECT * FROM api_keys WHERE ?1 IS NULL OR tenant = ?1 ORDER BY created_at, id"
_ACTIVE_KEYS = "SELECT * FROM api_keys WHERE revoked_at IS NULL ORDER BY created_at, id"


def _tool(row: sqlite3.Row, packs: Sequence[str]) -> Tool:
    return tool_from_row(dict(row), packs)


class SqliteStore:
    """The `Store` of one tenant on a local SQLite file (`keys.tenant_file` of `path`); one
    instance per process and tenant is the intended use.

    `busy_timeout` is how long (seconds) a write waits for another process's lock before the
    call raises `StoreUnavailable`. With `read_only_fallback` a file this process cannot write
    is opened read-only (`sqlite_wal.open_read_only`): reads answer, writes raise `StoreError`.
    The analyses count a used tool the catalog lacks as the one of `fallback_tools` it is.
    """

    def __init__(
        self,
        path: Path,
        *,
        retention: Retention | None = None,
        clock: Clock = utc_now,
        busy_timeout: float = 5.0,
        tenant: str = DEFAULT_TENANT,
        read_only_fallback: bool = False,
        fallback_tools: Collection[str] = DEFAULT_FALLBACK_TOOLS,
    ) -> None:
        self._tenant = check_tenant(tenant)
        self._fallbacks = tuple(fallback_tools)
        self._read_only_fallback = read_only_fallback
        self._path = tenant_file(Path(path), self._tenant)
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

    @property
    def tenant(self) -> str:
        return self._tenant

    # --- plumbing -------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = sqlite_schema.connect(
                self._path, self._busy_timeout, read_only_fallback=self._read_only_fallback
            )
        return self._conn

    def _work(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Runs on the worker thread: open lazily, run, translate sqlite3 errors."""
        try:
            return fn(self._connection())
        except sqlite3.Error as exc:
            raise translate(exc, self._path) from exc

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreError(f"sqlite store {self._path} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._work, fn)

    # --- lifecycle ------------------------------------------------------------------------

    async def migrate(self, *, reader: bool = False) -> None:
        await self._run(partial(sqlite_schema.create, reader=reader))
        log.info("store_migrated", store=self.uri, schema_version=sqlite_schema.SCHEMA_VERSION)

    async def exists(self) -> bool:
        """Whether this tenant's file exists (on `:memory:`, whether this store opened its
        private database), without opening it: opening makes the file."""
        if str(self._path) == ":memory:":
            return self._conn is not None
        return self._path.exists()

    async def ping(self) -> None:
        await self._run(lambda conn: conn.execute("SELECT 1").fetchone())

    async def state(self) -> StoreState:
        def work(conn: sqlite3.Connection) -> StoreState:
            row = conn.execute("SELECT catalog_version, exemplar_version FROM meta").fetchone()
            if row is None:
                raise StoreError(NO_STATE)
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
        rows = [tool_row(t) for t in last_per_name(tools)]

        def work(conn: sqlite3.Connection) -> UpsertResult:
            upserted = unchanged = 0
            changed = False
            now = ts(self._clock())
            with transaction(conn):
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
                    bump(conn, BUMP_CATALOG)
            return UpsertResult(upserted=upserted, unchanged=unchanged, moved=changed)

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
            with transaction(conn):
                if conn.execute("SELECT 1 FROM tools WHERE name = ?", (name,)).fetchone() is None:
                    return False
                gone = conn.execute(
                    "DELETE FROM exemplars WHERE tool = ? RETURNING query_norm", (name,)
                ).fetchall()
                if gone:
                    sqlite_exemplars.tombstone(conn, [row[0] for row in gone])
                conn.execute("DELETE FROM tool_packs WHERE tool = ?", (name,))
                sqlite_sessions.forget_tool(conn, name)
                conn.execute("DELETE FROM tools WHERE name = ?", (name,))
                bump(conn, BUMP_CATALOG)
            return True

        return await self._run(work)

    # --- turns ----------------------------------------------------------------------------

    async def record_turns(self, turns: Sequence[Turn]) -> int:
        rows = [turn_row(t, ts) for t in turns]
        if not rows:
            return 0
        by_id = {t.id: t for t in turns}

        def work(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                # Only turns new to the store link to sessions and count: a resent id is not
                # counted twice. An id sent twice in one batch is one turn, its last version.
                stored = sqlite_sessions.stored_ids(conn, list(by_id))
                # The insert counts new ids (a repeat inside the batch counts once); the update
                # then applies every version in order, so the last one sent wins.
                inserted = conn.executemany(sql.INSERT_TURN, rows).rowcount
                conn.executemany(sql.UPDATE_TURN, rows)
                sqlite_sessions.record(
                    conn, [t for i, t in by_id.items() if i not in stored], self._retention
                )
            return max(inserted, 0)

        return await self._run(work)

    async def recorded_turn_ids(self, turn_ids: Sequence[str]) -> set[str]:
        ids = list(turn_ids)
        return await self._run(lambda conn: sqlite_sessions.stored_ids(conn, ids)) if ids else set()

    async def get_turn(self, turn_id: str) -> Turn | None:
        turns = await self._turns("SELECT * FROM turns WHERE id = ?", (turn_id,))
        return turns[0] if turns else None

    async def undecided_turns(self, before: datetime, limit: int) -> list[Turn]:
        return await self._turns(sql.UNDECIDED_TURNS, (ts(before), max(limit, 0)))

    async def refused_turns(self, before: datetime, limit: int) -> list[Turn]:
        return await self._turns(sql.REFUSED_TURNS, (ts(before), BUDGET_SPENT, max(limit, 0)))

    async def session_tails(self, session_ids: Sequence[str]) -> dict[str, SessionTail]:
        return await self._run(lambda conn: sqlite_sessions.read_tails(conn, session_ids))

    async def session_turns(self, limit: int) -> list[Turn]:
        return await self._turns(sql.SESSION_TURNS, (max(limit, 0),))

    async def delete_turns(self, before: datetime, limit: int) -> TurnsDeleted:
        return await self._run(lambda conn: sql.delete_before(conn, ts(before), max(limit, 0)))

    async def _turns(self, sql: str, params: tuple[object, ...]) -> list[Turn]:
        return await self._run(
            lambda conn: [turn_from_row(dict(row), dt) for row in conn.execute(sql, params)]
        )

    # --- exemplars ------------------------------------------------------------------------

    async def save_exemplars(
        self, exemplars: Sequence[Exemplar], *, replayed: bool = False
    ) -> SaveResult:
        check_tiers(exemplars)
        if not exemplars:
            return SaveResult()
        result = await self._run(
            lambda conn: sqlite_exemplars.save(
                conn, exemplars, self._retention, self._clock(), replayed
            )
        )
        if result.evicted:
            log.info("exemplars_evicted", store=self.uri, count=result.evicted)
        return result

    async def expire_exemplars(self, now: datetime) -> int:
        evicted = await self._run(lambda conn: sqlite_exemplars.expire(conn, self._retention, now))
        if evicted:
            log.info("exemplars_expired", store=self.uri, count=evicted)
        return evicted

    async def exemplars_for_queries(self, queries: Sequence[str]) -> dict[str, Exemplar]:
        keys = sorted({normalise_query(q) for q in queries})
        if not keys:
            return {}
        return await self._run(lambda conn: sqlite_exemplars.by_queries(conn, keys))

    async def exemplars_for_tool(self, tool: str) -> list[Exemplar]:
        return await self._run(lambda conn: sqlite_exemplars.for_tool(conn, tool))

    async def exemplars_since(self, version: int) -> ExemplarDelta:
        return await self._run(lambda conn: sqlite_exemplars.since(conn, version))

    async def delete_exemplar(self, exemplar_id: str) -> bool:
        return await self._run(lambda conn: sqlite_exemplars.delete(conn, exemplar_id))

    # --- oracle calls ---------------------------------------------------------------------

    async def record_oracle_call(self, call: OracleCall) -> None:
        params = call_row(call, ts)

        def work(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute(_UPSERT_CALL, params)

        await self._run(work)

    async def oracle_calls(
        self, turn_id: str | None = None, since: datetime | None = None
    ) -> list[OracleCall]:
        def work(conn: sqlite3.Connection) -> list[OracleCall]:
            rows = conn.execute(
                "SELECT * FROM oracle_calls WHERE (:turn IS NULL OR turn_id = :turn)"
                " AND (:since IS NULL OR at >= :since) ORDER BY at, rowid",
                {"turn": turn_id, "since": None if since is None else ts(since)},
            )
            return [call_from_row(dict(row), dt) for row in rows]

        return await self._run(work)

    # --- analytics ------------------------------------------------------------------------

    async def analytics(self, name: str, since: datetime | None = None) -> AnalyticsResult:
        """One analysis of `cypher/analytics/`, in SQL (`sqlite_analytics`), finished alike."""
        get_analysis(name)  # NotFound before any I/O
        since_text = None if since is None else ts(since)
        fallbacks = self._fallbacks
        rows = await self._run(
            lambda conn: sqlite_analytics.raw_rows(conn, name, since_text, fallbacks)
        )
        return finish(name, rows)

    # --- API keys -------------------------------------------------------------------------

    async def save_key(self, key: ApiKey) -> None:
        check_key_tenant(self._tenant)
        row = key_row(key, ts)

        def work(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute(_INSERT_KEY, row)

        await self._run(work)

    async def revoke_key(self, key_id: str) -> bool:
        check_key_tenant(self._tenant)
        now = ts(self._clock())

        def work(conn: sqlite3.Connection) -> bool:
            with transaction(conn):
                return conn.execute(_REVOKE_KEY, (now, key_id)).rowcount > 0

        return await self._run(work)

    async def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        return await self._keys(_LIST_KEYS, (tenant,))

    async def active_keys(self) -> list[ApiKey]:
        return await self._keys(_ACTIVE_KEYS, ())

    async def _keys(self, query: str, params: tuple[object, ...]) -> list[ApiKey]:
        check_key_tenant(self._tenant)
        return await self._run(
            lambda conn: [key_from_row(dict(r), dt) for r in conn.execute(query, params)]
        )
