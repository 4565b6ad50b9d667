"""The Store contract on Neo4j: the production store every API replica shares.

Each operation is one Cypher file from `cypher/queries/` with `$parameters`; reads are routed as
reads, writes run in managed write transactions (retried by the driver on transient errors such as
deadlocks) and the database is always named. Every write that moves a version first takes the
write lock of the `(:Meta {key: 'state'})` node (`queries/lock_meta`), so concurrent writers on any
replica get strictly increasing, unique versions.

Embeddings are stored as float32 little-endian bytes (`pack_vector`), as in the SQLite store:
sending or reading a batch of them as lists of floats cost seconds of driver time per batch.
Exemplars written as lists by older versions are still read.

Driver errors never leave this module: unreachable servers and refused credentials become
`StoreUnavailable`, anything else the server refuses becomes `StoreError`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Concatenate, LiteralString, ParamSpec, TypeVar, cast
from urllib.parse import unquote, urlsplit, urlunsplit

import structlog
from neo4j import AsyncDriver, AsyncGraphDatabase, AsyncManagedTransaction, Record, RoutingControl
from neo4j.exceptions import (
    AuthError,
    ConstraintError,
    DriverError,
    Neo4jError,
    ServiceUnavailable,
    SessionExpired,
)
from neo4j.time import DateTime

from toolselect.analytics.registry import finish, get_analysis
from toolselect.errors import StoreError, StoreUnavailable
from toolselect.graph import cypher
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

log = structlog.get_logger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
Work = Callable[Concatenate[AsyncManagedTransaction, P], Awaitable[R]]

_TURN_CHUNK = 2_000  # turns per transaction: bounded transaction memory for large batches
_CONNECT_TIMEOUT_S = 5.0
_RETRY_TIME_S = 5.0  # managed transactions retry transient errors (deadlocks, failover) this long
_UNAVAILABLE = (ServiceUnavailable, SessionExpired, AuthError, OSError)
_TURN_FIELDS = tuple(f.name for f in fields(Turn))
_CALL_FIELDS = tuple(f.name for f in fields(OracleCall))
_EXEMPLAR_PROPS = tuple(f.name for f in fields(Exemplar) if f.name != "tool")


def query_key(query_norm: str) -> str:
    """The fixed-size key a normalised query is unique by: Neo4j range indexes refuse string
    keys over about 8 KiB, and NFKC can grow an 8 KiB query eighteenfold."""
    return hashlib.sha256(query_norm.encode()).hexdigest()


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _q(name: str) -> LiteralString:
    # Query text only ever comes from the Cypher files shipped in the package (mypy reads
    # LiteralString as str, so no cast is needed for the driver's signature).
    return cypher.query(f"queries/{name}")


def _without_credentials(uri: str) -> str:
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _to_db(value: datetime) -> datetime:
    """Aware UTC, so Neo4j stores a DateTime (a naive value is taken to be UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _from_db(value: Any) -> datetime:
    native = value.to_native() if isinstance(value, DateTime) else value
    return cast(datetime, native).astimezone(UTC)


def _tool(props: Mapping[str, Any], packs: Sequence[str]) -> Tool:
    schema = json.loads(props.get("input_schema") or "{}")
    return Tool(props["name"], props.get("description", ""), schema, tuple(sorted(packs)))


def _turn(props: Mapping[str, Any]) -> Turn:
    values: dict[str, Any] = {name: props.get(name) for name in _TURN_FIELDS}
    values["at"] = _from_db(values["at"])
    values["flagged"] = bool(values["flagged"])
    return Turn(**values)


def _exemplar(props: Mapping[str, Any], tool: str) -> Exemplar:
    return Exemplar(
        id=props["id"],
        query=props["query"],
        tool=tool,
        tier=props["tier"],
        embedder=props["embedder"],
        embedding=_embedding(props.get("embedding")),
        created_at=_from_db(props["created_at"]),
        confidence=float(props["confidence"]),
        turn_id=props.get("turn_id"),
        version=int(props["version"]),
    )


def _embedding(value: Any) -> tuple[float, ...]:
    """Float32 bytes as written now, or the list of floats stores wrote before."""
    if isinstance(value, bytes | bytearray):
        return unpack_vector(value)
    return tuple(float(x) for x in value or ())


def _call(props: Mapping[str, Any]) -> OracleCall:
    values: dict[str, Any] = {name: props.get(name) for name in _CALL_FIELDS}
    values["at"] = _from_db(values["at"])
    return OracleCall(**values)


async def _rows(tx: AsyncManagedTransaction, name: str, params: dict[str, Any]) -> list[Record]:
    result = await tx.run(_q(name), params)
    return [record async for record in result]


async def _one(tx: AsyncManagedTransaction, name: str, params: dict[str, Any]) -> Record:
    rows = await _rows(tx, name, params)
    return rows[0]


class Neo4jStore:
    """`Store` on a Neo4j 5 database (Community or Enterprise, single server, cluster or Aura)."""

    def __init__(
        self,
        driver: AsyncDriver,
        database: str = "neo4j",
        *,
        uri: str = "",
        retention: Retention = Retention(),  # noqa: B008 - frozen, so sharing it is safe
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._driver = driver
        self._database = database
        self._uri = _without_credentials(uri)
        self._retention = retention
        self._clock = clock

    @property
    def uri(self) -> str:
        return self._uri

    # --- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except _UNAVAILABLE as exc:
            raise StoreUnavailable(f"cannot reach Neo4j at {self._uri}: {exc}") from exc
        except (Neo4jError, DriverError) as exc:
            raise StoreError(f"Neo4j at {self._uri} refused the operation: {exc}") from exc

    async def _read(self, name: str, params: dict[str, Any]) -> list[Record]:
        with self._translated():
            result = await self._driver.execute_query(
                _q(name), params, routing_=RoutingControl.READ, database_=self._database
            )
        return list(result.records)

    async def _write_once(self, work: Work[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        async with self._driver.session(database=self._database) as session:
            return await session.execute_write(work, *args, **kwargs)

    async def _write(self, work: Work[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        with self._translated():
            try:
                return await self._write_once(work, *args, **kwargs)
            except ConstraintError:
                # Two writers MERGEing one new key race once; the retry finds the winner's node.
                return await self._write_once(work, *args, **kwargs)

    # --- lifecycle --------------------------------------------------------------------------

    async def migrate(self) -> None:
        """Create constraints, indexes and the state record; idempotent."""
        count = 0
        with self._translated():
            for name in cypher.names("schema"):
                for statement in cypher.statements(name):
                    await self._driver.execute_query(statement, database_=self._database)
                    count += 1
            await self._driver.execute_query(
                _q("await_indexes"), {"timeout_s": 300}, database_=self._database
            )
            await self._backfill_query_keys()
        await self._write(_lock_meta)
        log.info("neo4j_migrated", store=self._uri, database=self._database, statements=count)

    async def _backfill_query_keys(self) -> None:
        """Give exemplars and tombstones of older stores their `query_key` (hashed here, since
        Cypher has no SHA-256)."""
        while True:
            records, _, _ = await self._driver.execute_query(
                _q("missing_query_keys"), database_=self._database
            )
            if not records:
                return
            rows = [{"node": r["node"], "key": query_key(r["query_norm"])} for r in records]
            await self._driver.execute_query(
                _q("set_query_keys"), {"rows": rows}, database_=self._database
            )

    async def ping(self) -> None:
        """Raise `StoreUnavailable` unless the database answers now."""
        await self._read("ping", {})

    async def state(self) -> StoreState:
        row = (await self._read("state", {}))[0]
        return StoreState(int(row["catalog_version"]), int(row["exemplar_version"]))

    async def close(self) -> None:
        with self._translated():
            await self._driver.close()

    # --- tools ------------------------------------------------------------------------------

    async def upsert_tools(self, tools: Sequence[Tool], pack: str | None = None) -> UpsertResult:
        by_name = {tool.name: tool for tool in last_per_name(tools)}
        if not by_name:
            return UpsertResult(upserted=0, unchanged=0)
        rows = [
            {
                "name": t.name,
                "namespace": t.namespace,
                "bare_name": t.bare_name,
                "description": t.description,
                "input_schema": canonical_json(t.input_schema),
                "content_hash": t.content_hash,
            }
            for t in by_name.values()
        ]
        links = [] if pack is None else [{"tool": name, "pack": pack} for name in by_name]

        async def work(tx: AsyncManagedTransaction) -> int:
            await _lock_meta(tx)
            params = {"tools": rows, "now": _to_db(self._clock())}
            changed = int((await _one(tx, "upsert_tools", params))["changed"])
            added = int((await _one(tx, "add_to_packs", {"links": links}))["added"]) if links else 0
            if changed or added:
                await _bump(tx, catalog=1)
            return changed

        changed = await self._write(work)
        return UpsertResult(upserted=changed, unchanged=len(rows) - changed)

    async def list_tools(self, pack: str | None = None) -> list[Tool]:
        rows = await self._read("list_tools", {"pack": pack})
        # Sorted here: Cypher orders strings by UTF-16 units, Python (and SQLite) by code points.
        return sorted((_tool(r["tool"], r["packs"]) for r in rows), key=lambda t: t.name)

    async def get_tool(self, name: str) -> Tool | None:
        rows = await self._read("get_tool", {"name": name})
        return _tool(rows[0]["tool"], rows[0]["packs"]) if rows else None

    async def delete_tool(self, name: str) -> bool:
        async def work(tx: AsyncManagedTransaction) -> bool:
            state = await _lock_meta(tx)
            ids = [r["id"] for r in await _rows(tx, "tool_exemplar_ids", {"name": name})]
            if ids:
                await _tombstone(tx, ids, state.exemplar_version + 1)
            if not (await _one(tx, "delete_tool", {"name": name}))["deleted"]:
                return False
            await _bump(tx, catalog=1, exemplar=1 if ids else 0)
            return True

        return await self._write(work)

    # --- turns ------------------------------------------------------------------------------

    async def record_turns(self, turns: Sequence[Turn]) -> int:
        """Record turns a chunk per transaction. Intake sends new turns, so each chunk is first
        CREATEd (`create_turns`, about half the server time of MERGE); when the uniqueness
        constraint refuses it (a resent id, or another replica racing), the chunk is MERGEd
        instead (`record_turns`), which updates stored turns in place."""
        # An id sent twice in one batch is one turn; its last version wins.
        by_id = {turn.id: _turn_row(turn) for turn in turns}
        rows = list(by_id.values())
        created = 0
        for start in range(0, len(rows), _TURN_CHUNK):
            chunk = rows[start : start + _TURN_CHUNK]
            with self._translated():
                try:
                    created += await self._write_once(_create_turns, chunk)
                    continue
                except ConstraintError:
                    pass  # an id of the chunk is stored already
            created += await self._write(_record_turns, chunk)
        return created

    async def get_turn(self, turn_id: str) -> Turn | None:
        rows = await self._read("get_turn", {"id": turn_id})
        return _turn(rows[0]["turn"]) if rows else None

    # --- exemplars --------------------------------------------------------------------------

    async def save_exemplars(self, exemplars: Sequence[Exemplar]) -> SaveResult:
        """See `Store.save_exemplars`: one write transaction of three queries whatever the batch
        size: lock and read the current labels, write (`UNWIND`), then retention and the
        version move."""
        for exemplar in exemplars:
            check_tier(exemplar)
        if not exemplars:
            return SaveResult()
        keys = {e.query_norm: query_key(e.query_norm) for e in exemplars}
        guard = {"tools": sorted({e.tool for e in exemplars}), "keys": sorted(keys.values())}

        async def work(tx: AsyncManagedTransaction) -> tuple[SaveResult, int]:
            found = await _one(tx, "exemplars_guard", guard)
            stored = {s["query_norm"]: StoredLabel(s["tool"], s["tier"]) for s in found["stored"]}
            changing, unknown = plan_saves(exemplars, stored, set(found["known"]))
            if not changing:
                return SaveResult(unknown_tool=tuple(unknown)), 0
            version = int(found["exemplar_version"]) + 1
            written = last_per_query(changing)
            rows = [
                {"tool": e.tool, "exemplar": _exemplar_props(e, keys[e.query_norm], version)}
                for e in written
            ]
            await _rows(tx, "save_exemplars", {"rows": rows})
            evicted = await self._evict(tx, sorted({e.tool for e in written}), version)
            changed = tuple(replace(e, version=version) for e in changing)
            return SaveResult(changed, tuple(unknown), evicted), evicted

        result, evicted = await self._write(work)
        if evicted:
            log.info("exemplars_evicted", store=self._uri, count=evicted)
        return result

    async def save_exemplar(self, exemplar: Exemplar) -> bool:
        return await save_one(self, exemplar)

    async def _evict(self, tx: AsyncManagedTransaction, tools: list[str], version: int) -> int:
        """Apply retention (expired, beyond the written tools' caps, beyond all; feedback
        exempt) with tombstones at `version`, and move the exemplar version to it."""
        limits = self._retention
        params = {
            "cutoff": _to_db(self._clock() - timedelta(days=limits.max_age_days)),
            "tools": tools,
            "per_tool": max(limits.per_tool, 0),
            "total": max(limits.total, 0),
            "version": version,
        }
        return int((await _one(tx, "evict_exemplars", params))["evicted"])

    async def exemplars_for_queries(self, queries: Sequence[str]) -> dict[str, Exemplar]:
        keys = sorted({query_key(normalise_query(q)) for q in queries})
        if not keys:
            return {}
        rows = await self._read("exemplars_for_queries", {"keys": keys})
        return {r["exemplar"]["query_norm"]: _exemplar(r["exemplar"], r["tool"]) for r in rows}

    async def exemplar_for_query(self, query: str) -> Exemplar | None:
        return await lookup_one(self, query)

    async def exemplars_for_tool(self, tool: str) -> list[Exemplar]:
        rows = await self._read("exemplars_for_tool", {"tool": tool})
        return [_exemplar(r["exemplar"], r["tool"]) for r in rows]

    async def exemplars_since(self, version: int) -> ExemplarDelta:
        """Exemplars written (by version) and normalised queries deleted after `version`.

        `ExemplarDelta.version` is read first, so a write committed meanwhile may appear in the
        lists and again in the next delta (applying one twice is harmless), never be missed.
        Saving a query drops its tombstone, so a query is normally in one list only; a consumer
        should still apply `deleted` first and `upserted` second, which is right either way.
        """

        async def work(tx: AsyncManagedTransaction) -> ExemplarDelta:
            current = int((await _one(tx, "state", {}))["exemplar_version"])
            written = await _rows(tx, "exemplars_since", {"version": version})
            gone = await _rows(tx, "tombstones_since", {"version": version})
            return ExemplarDelta(
                version=current,
                upserted=tuple(_exemplar(r["exemplar"], r["tool"]) for r in written),
                deleted=tuple(r["query_norm"] for r in gone),
            )

        with self._translated():
            async with self._driver.session(database=self._database) as session:
                return await session.execute_read(work)

    async def delete_exemplar(self, exemplar_id: str) -> bool:
        async def work(tx: AsyncManagedTransaction) -> bool:
            state = await _lock_meta(tx)
            if not await _tombstone(tx, [exemplar_id], state.exemplar_version + 1):
                return False
            await _bump(tx, exemplar=1)
            return True

        return await self._write(work)

    # --- oracle calls -----------------------------------------------------------------------

    async def record_oracle_call(self, call: OracleCall) -> None:
        props = {name: getattr(call, name) for name in _CALL_FIELDS} | {"at": _to_db(call.at)}

        async def work(tx: AsyncManagedTransaction) -> None:
            await _rows(tx, "record_oracle_call", {"call": props})

        await self._write(work)

    async def oracle_calls(self, turn_id: str | None = None) -> list[OracleCall]:
        rows = await self._read("oracle_calls", {"turn_id": turn_id})
        return [_call(r["call"]) for r in rows]

    # --- analytics --------------------------------------------------------------------------

    async def analytics(self, name: str, since: datetime | None = None) -> AnalyticsResult:
        """Run `cypher/analytics/<name>.cypher` as a read; rows finished as every store does."""
        columns = get_analysis(name).columns  # NotFound before any I/O
        params = {"since": None if since is None else _to_db(since).isoformat()}
        with self._translated():
            result = await self._driver.execute_query(
                cypher.query(f"analytics/{name}"),
                params,
                routing_=RoutingControl.READ,
                database_=self._database,
            )
        return finish(name, ([record[c] for c in columns] for record in result.records))


# --- transaction steps shared by several operations -------------------------------------------


async def _lock_meta(tx: AsyncManagedTransaction) -> StoreState:
    row = await _one(tx, "lock_meta", {})
    return StoreState(int(row["catalog_version"]), int(row["exemplar_version"]))


async def _bump(tx: AsyncManagedTransaction, *, catalog: int = 0, exemplar: int = 0) -> None:
    await _rows(tx, "bump_versions", {"catalog": catalog, "exemplar": exemplar})


async def _tombstone(tx: AsyncManagedTransaction, ids: Sequence[str], version: int) -> int:
    row = await _one(tx, "tombstone_exemplars", {"ids": list(ids), "version": version})
    return int(row["deleted"])


async def _record_turns(tx: AsyncManagedTransaction, rows: list[dict[str, Any]]) -> int:
    return int((await _one(tx, "record_turns", {"turns": rows}))["created"])


async def _create_turns(tx: AsyncManagedTransaction, rows: list[dict[str, Any]]) -> int:
    return int((await _one(tx, "create_turns", {"turns": rows}))["created"])


def _exemplar_props(exemplar: Exemplar, key: str, version: int) -> dict[str, Any]:
    props: dict[str, Any] = {name: getattr(exemplar, name) for name in _EXEMPLAR_PROPS}
    return props | {
        "query_norm": exemplar.query_norm,
        "query_key": key,
        "embedding": pack_vector(exemplar.embedding),
        "created_at": _to_db(exemplar.created_at),
        "version": version,
    }


def _turn_row(turn: Turn) -> dict[str, Any]:
    """A turn's properties; `at` as ISO 8601 text, which the query turns into a DateTime
    (the driver's DateTime encoding took more client time than the rest of the batch)."""
    row = {name: getattr(turn, name) for name in _TURN_FIELDS}
    row["at"] = _to_db(turn.at).isoformat()
    return row


async def connect_neo4j(
    uri: str,
    username: str,
    password: str,
    database: str,
    *,
    retention: Retention = Retention(),  # noqa: B008 - frozen, so sharing it is safe
    verify: bool = True,
) -> Neo4jStore:
    """A store on a reachable, authenticated Neo4j; `StoreUnavailable` otherwise.

    Credentials may also come in the URI (`bolt://user:pw@host`); the arguments win. They are
    passed to the driver as auth and never appear in `uri` or in messages. With
    `verify=False` nothing is checked now (a server that starts before its database may wait
    for it); a malformed URI still raises at once.
    """
    parts = urlsplit(uri)
    username = username or unquote(parts.username or "")
    password = password or unquote(parts.password or "")
    shown = _without_credentials(uri)

    def unavailable(exc: BaseException) -> StoreUnavailable:
        cause = str(exc).replace(uri, shown)
        if password:
            cause = cause.replace(password, "***")
        return StoreUnavailable(f"cannot reach Neo4j at {shown}: {cause}")

    try:
        driver = AsyncGraphDatabase.driver(
            shown,
            auth=(username, password) if password else None,
            # Fail within seconds when the server is gone: callers degrade on StoreUnavailable,
            # and the driver's default retries a transaction for 30 s.
            connection_timeout=_CONNECT_TIMEOUT_S,
            max_transaction_retry_time=_RETRY_TIME_S,
        )
    except (DriverError, Neo4jError, ValueError) as exc:  # a malformed URI or unknown scheme
        raise unavailable(exc) from exc
    store = Neo4jStore(driver, database, uri=shown, retention=retention)
    if not verify:
        return store
    try:
        await driver.verify_connectivity()
        await store.ping()  # also proves the database exists
    except (StoreError, DriverError, Neo4jError, OSError) as exc:
        await driver.close()
        cause = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ else exc
        raise unavailable(cause) from cause
    return store
