"""The Store contract on Neo4j: the production store every API replica shares.

Each operation is one Cypher file from `cypher/queries/` with `$parameters`; reads are routed as
reads, writes run in managed write transactions (retried by the driver on transient errors such as
deadlocks) and the database is always named. Every write that moves a version first takes the
write lock of the `(:Meta {tenant, key: 'state'})` node (`queries/lock_meta`), so concurrent
writers on any replica get strictly increasing, unique versions.

A store is one tenant's view of the database: every node of its data carries `tenant`, every
query matches and creates nodes with `tenant: $tenant`, and `$tenant` is added to the parameters
of every query in one place (`_read`, `_params` and `tx.Scoped`), never by the operations; the
uniqueness constraints are per tenant (`cypher/schema/constraints.cypher`). API keys are not a
tenant's data: only the `default` tenant's store reads and writes them.

Embeddings are stored as float32 little-endian bytes (`pack_vector`), as in the SQLite store:
sending or reading a batch of them as lists of floats cost seconds of driver time per batch.
Exemplars written as lists by older versions are still read.

Driver errors never leave this module: unreachable servers and refused credentials become
`StoreUnavailable`, anything else the server refuses becomes `StoreError`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

import structlog
from neo4j import READ_ACCESS, AsyncDriver, AsyncManagedTransaction, Record, RoutingControl
from neo4j.exceptions import ConstraintError

from toolselect.analytics.registry import finish, get_analysis
from toolselect.clock import Clock, utc_now
from toolselect.keys import DEFAULT_TENANT, check_tenant, key_from_row, key_row
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
from toolselect.store.neo4j import cypher, migration
from toolselect.store.neo4j import tx as neo4j_tx
from toolselect.store.neo4j.boundary import translated, without_credentials
from toolselect.store.neo4j.tx import Scoped, from_db, lock_meta, q, query_key, to_db, to_db_text
from toolselect.store.rules import (
    call_from_row,
    call_row,
    check_key_tenant,
    check_tiers,
    exemplar_from_row,
    last_per_name,
    tool_from_row,
    tool_row,
    turn_from_row,
    turn_row,
)
from toolselect.store.session_rules import SessionTail, turn_tools

log = structlog.get_logger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
Work = Callable[Concatenate[Scoped, P], Awaitable[R]]

_TURN_CHUNK = 2_000  # turns per transaction: bounded transaction memory for large batches


def _exemplar(props: Mapping[str, Any], tool: str) -> Exemplar:
    return exemplar_from_row({**props, "tool": tool}, from_db)


class Neo4jStore:
    """`Store` on a Neo4j 5 database (Community or Enterprise, server, cluster or Aura) for one
    tenant; the stores of other tenants share its driver (`for_tenant`: one connection pool,
    the schema migrated once) and never see each other's data. The analyses count a used tool
    the catalog lacks as the one of `fallback_tools` it is (their `$fallbacks`)."""

    def __init__(
        self,
        driver: AsyncDriver,
        database: str = "neo4j",
        *,
        uri: str = "",
        retention: Retention = Retention(),  # noqa: B008 - frozen, so sharing it is safe
        clock: Clock = utc_now,
        tenant: str = DEFAULT_TENANT,
        fallback_tools: Collection[str] = DEFAULT_FALLBACK_TOOLS,
    ) -> None:
        self._tenant = check_tenant(tenant)
        # A set, as `names.fallback_name` reads it (the analyses' `$fallbacks`).
        self._fallbacks = sorted(set(fallback_tools))
        self._driver = driver
        self._database = database
        self._uri = without_credentials(uri)
        self._retention = retention
        self._clock = clock
        self._schema = migration.Once()
        self._owns_driver = True

    def for_tenant(self, tenant: str) -> Neo4jStore:
        """`tenant`'s store on this one's driver (closed by this one) and migrated schema."""
        other = Neo4jStore(
            self._driver,
            self._database,
            uri=self._uri,
            retention=self._retention,
            clock=self._clock,
            tenant=tenant,
            fallback_tools=self._fallbacks,
        )
        other._schema = self._schema
        other._owns_driver = False
        return other

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def tenant(self) -> str:
        return self._tenant

    # --- plumbing ---------------------------------------------------------------------------

    def _params(self, params: dict[str, Any]) -> dict[str, Any]:
        """`params` with this store's `$tenant` (which no caller can override)."""
        return {**params, "tenant": self._tenant}

    async def _read(self, name: str, params: dict[str, Any]) -> list[Record]:
        with translated(self._uri):
            result = await self._driver.execute_query(
                q(name),
                self._params(params),
                routing_=RoutingControl.READ,
                database_=self._database,
            )
        return list(result.records)

    async def _write_once(self, work: Work[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        async def scoped(tx: AsyncManagedTransaction) -> R:
            return await work(Scoped(tx, self._tenant), *args, **kwargs)

        async with self._driver.session(database=self._database) as session:
            return await session.execute_write(scoped)

    async def _write(self, work: Work[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        with translated(self._uri):
            try:
                return await self._write_once(work, *args, **kwargs)
            except ConstraintError:
                # Two writers MERGEing one new key race once; the retry finds the winner's node.
                return await self._write_once(work, *args, **kwargs)

    # --- lifecycle --------------------------------------------------------------------------

    async def migrate(self, *, reader: bool = False) -> None:
        """Migrate old data (to tenant `default`), create constraints, indexes and this tenant's
        state record (not for a `reader`: it takes the write lock, and the schema only when the
        database was not migrated by this version's files); idempotent (`migration`)."""
        count = 0
        with translated(self._uri):
            if not (reader and await migration.current(self._driver, self._database)):
                count = await self._schema.migrate(
                    self._driver, self._database, again=self._owns_driver
                )
        if not reader:
            await self._write(lock_meta)
        log.info(
            "neo4j_migrated",
            store=self._uri,
            database=self._database,
            tenant=self._tenant,
            statements=count,
        )

    async def ping(self) -> None:
        """Raise `StoreUnavailable` unless the database answers now. One auto-commit query,
        which the driver does not retry: a refused connection is the answer (`execute_query`
        retried it for `max_transaction_retry_time`, warning at each attempt, so a readiness
        probe of a stopped Neo4j took its whole bound)."""
        with translated(self._uri):
            async with self._driver.session(
                database=self._database, default_access_mode=READ_ACCESS
            ) as session:
                result = await session.run(q("ping"), self._params({}))
                await result.consume()

    async def exists(self) -> bool:
        """Whether this tenant has any node (`queries/tenant_exists`: index seeks, a read)."""
        return bool((await self._read("tenant_exists", {}))[0]["exists"])

    async def state(self) -> StoreState:
        row = (await self._read("state", {}))[0]
        return StoreState(int(row["catalog_version"]), int(row["exemplar_version"]))

    async def close(self) -> None:
        if self._owns_driver:
            with translated(self._uri):
                await self._driver.close()

    # --- tools ------------------------------------------------------------------------------

    async def upsert_tools(self, tools: Sequence[Tool], pack: str | None = None) -> UpsertResult:
        by_name = {tool.name: tool for tool in last_per_name(tools)}
        if not by_name:
            return UpsertResult(upserted=0, unchanged=0, moved=False)
        rows = [tool_row(t) for t in by_name.values()]
        links = [] if pack is None else [{"tool": name, "pack": pack} for name in by_name]

        async def work(tx: Scoped) -> tuple[int, bool]:
            await lock_meta(tx)
            params = {"tools": rows, "now": to_db(self._clock())}
            changed = int((await neo4j_tx.one(tx, "upsert_tools", params))["changed"])
            added = 0
            if links:
                added = int((await neo4j_tx.one(tx, "add_to_packs", {"links": links}))["added"])
            if changed or added:
                await neo4j_tx.bump(tx, catalog=1)
            return changed, bool(changed or added)

        changed, moved = await self._write(work)
        return UpsertResult(upserted=changed, unchanged=len(rows) - changed, moved=moved)

    async def list_tools(self, pack: str | None = None) -> list[Tool]:
        rows = await self._read("list_tools", {"pack": pack})
        # Sorted here: Cypher orders strings by UTF-16 units, Python (and SQLite) by code points.
        return sorted((tool_from_row(r["tool"], r["packs"]) for r in rows), key=lambda t: t.name)

    async def get_tool(self, name: str) -> Tool | None:
        rows = await self._read("get_tool", {"name": name})
        return tool_from_row(rows[0]["tool"], rows[0]["packs"]) if rows else None

    async def delete_tool(self, name: str) -> bool:
        async def work(tx: Scoped) -> bool:
            state = await lock_meta(tx)
            ids = [r["id"] for r in await neo4j_tx.rows(tx, "tool_exemplar_ids", {"name": name})]
            if ids:
                await neo4j_tx.tombstone(tx, ids, state.exemplar_version + 1)
            if not (await neo4j_tx.one(tx, "delete_tool", {"name": name}))["deleted"]:
                return False
            await neo4j_tx.bump(tx, catalog=1, exemplar=1 if ids else 0)
            return True

        return await self._write(work)

    # --- turns ------------------------------------------------------------------------------

    async def record_turns(self, turns: Sequence[Turn]) -> int:
        """Record turns a chunk per transaction. Intake sends new turns, so each chunk is first
        CREATEd (`create_turns`, about half the server time of MERGE); when the uniqueness
        constraint refuses it (a resent id, or another replica racing), the chunk is MERGEd
        instead (`record_turns`), which updates stored turns in place."""
        # An id sent twice in one batch is one turn, its last version. New turns link to their
        # sessions and count their tools in the same transaction (`neo4j_tx.record_sessions`).
        batch = list({turn.id: turn for turn in turns}.values())
        created = 0
        for start in range(0, len(batch), _TURN_CHUNK):
            chunk = batch[start : start + _TURN_CHUNK]
            # `used_names`: the turn's tools as a list Cypher reads (`used_tools` is JSON text).
            rows = [{**turn_row(t, to_db_text), "used_names": list(turn_tools(t))} for t in chunk]
            with translated(self._uri):
                try:
                    created += await self._write_once(
                        neo4j_tx.create_turns, rows, chunk, self._retention
                    )
                    continue
                except ConstraintError:
                    pass  # an id of the chunk is stored already
            created += await self._write(neo4j_tx.record_turns, rows, chunk, self._retention)
        return created

    async def get_turn(self, turn_id: str) -> Turn | None:
        turns = await self._turns("get_turn", {"id": turn_id})
        return turns[0] if turns else None

    async def recorded_turn_ids(self, turn_ids: Sequence[str]) -> set[str]:
        rows = await self._read("recorded_turn_ids", {"ids": sorted(set(turn_ids))})
        return {r["id"] for r in rows}

    async def undecided_turns(self, before: datetime, limit: int) -> list[Turn]:
        return await self._turns(
            "undecided_turns", {"before": to_db_text(before), "limit": max(limit, 0)}
        )

    async def refused_turns(self, before: datetime, limit: int) -> list[Turn]:
        params = {"before": to_db_text(before), "spent": BUDGET_SPENT, "limit": max(limit, 0)}
        return await self._turns("refused_turns", params)

    async def session_tails(self, session_ids: Sequence[str]) -> dict[str, SessionTail]:
        rows = await self._read("read_session_tails", {"ids": list(session_ids)})
        return {row["session"]: neo4j_tx.tail(row) for row in rows}

    async def session_turns(self, limit: int) -> list[Turn]:
        return await self._turns("session_turns", {"limit": max(limit, 0)})

    async def delete_turns(self, before: datetime, limit: int) -> TurnsDeleted:
        params = {"before": to_db_text(before), "limit": max(limit, 0)}
        gone = await self._write(neo4j_tx.one, "delete_turns", params)
        return TurnsDeleted(int(gone["turns"]), int(gone["calls"]), int(gone["sessions"]))

    async def _turns(self, name: str, params: dict[str, Any]) -> list[Turn]:
        return [turn_from_row(r["turn"], from_db) for r in await self._read(name, params)]

    # --- exemplars --------------------------------------------------------------------------

    async def save_exemplars(
        self, exemplars: Sequence[Exemplar], *, replayed: bool = False
    ) -> SaveResult:
        """See `Store.save_exemplars`: one write transaction (`neo4j_tx.save_exemplars`)."""
        check_tiers(exemplars)
        if not exemplars:
            return SaveResult()
        result = await self._write(
            neo4j_tx.save_exemplars, exemplars, self._retention, self._clock(), replayed
        )
        if result.evicted:
            log.info("exemplars_evicted", store=self._uri, count=result.evicted)
        return result

    async def expire_exemplars(self, now: datetime) -> int:
        evicted = await self._write(neo4j_tx.expire_exemplars, self._retention, now)
        if evicted:
            log.info("exemplars_expired", store=self._uri, count=evicted)
        return evicted

    async def exemplars_for_queries(self, queries: Sequence[str]) -> dict[str, Exemplar]:
        keys = sorted({query_key(normalise_query(q)) for q in queries})
        if not keys:
            return {}
        rows = await self._read("exemplars_for_queries", {"keys": keys})
        return {r["exemplar"]["query_norm"]: _exemplar(r["exemplar"], r["tool"]) for r in rows}

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

        async def work(tx: Scoped) -> ExemplarDelta:
            current = int((await neo4j_tx.one(tx, "state", {}))["exemplar_version"])
            written = await neo4j_tx.rows(tx, "exemplars_since", {"version": version})
            gone = await neo4j_tx.rows(tx, "tombstones_since", {"version": version})
            return ExemplarDelta(
                version=current,
                upserted=tuple(_exemplar(r["exemplar"], r["tool"]) for r in written),
                deleted=tuple(r["query_norm"] for r in gone),
            )

        with translated(self._uri):
            async with self._driver.session(database=self._database) as session:
                return await session.execute_read(lambda tx: work(Scoped(tx, self._tenant)))

    async def delete_exemplar(self, exemplar_id: str) -> bool:
        async def work(tx: Scoped) -> bool:
            state = await lock_meta(tx)
            if not await neo4j_tx.tombstone(tx, [exemplar_id], state.exemplar_version + 1):
                return False
            await neo4j_tx.bump(tx, exemplar=1)
            return True

        return await self._write(work)

    # --- oracle calls -----------------------------------------------------------------------

    async def record_oracle_call(self, call: OracleCall) -> None:
        await self._write(neo4j_tx.rows, "record_oracle_call", {"call": call_row(call, to_db)})

    async def oracle_calls(
        self, turn_id: str | None = None, since: datetime | None = None
    ) -> list[OracleCall]:
        since_text = None if since is None else to_db_text(since)
        rows = await self._read("oracle_calls", {"turn_id": turn_id, "since": since_text})
        return [call_from_row(r["call"], from_db) for r in rows]

    # --- analytics --------------------------------------------------------------------------

    async def analytics(self, name: str, since: datetime | None = None) -> AnalyticsResult:
        """Run `cypher/analytics/<name>.cypher` as a read; rows finished as every store does."""
        columns = get_analysis(name).columns  # NotFound before any I/O
        params = {
            "since": None if since is None else to_db_text(since),
            "fallbacks": self._fallbacks,
        }
        with translated(self._uri):
            result = await self._driver.execute_query(
                cypher.query(f"analytics/{name}"),
                self._params(params),
                routing_=RoutingControl.READ,
                database_=self._database,
            )
        return finish(name, ([record[c] for c in columns] for record in result.records))

    # --- API keys ---------------------------------------------------------------------------

    async def save_key(self, key: ApiKey) -> None:
        check_key_tenant(self._tenant)
        props = key_row(key, to_db)

        async def work(tx: Scoped) -> None:
            await neo4j_tx.rows(tx, "save_api_key", {"key": props})

        await self._write(work)

    async def revoke_key(self, key_id: str) -> bool:
        check_key_tenant(self._tenant)
        params = {"id": key_id, "now": to_db(self._clock())}

        async def work(tx: Scoped) -> bool:
            return bool((await neo4j_tx.one(tx, "revoke_api_key", params))["revoked"])

        return await self._write(work)

    async def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        check_key_tenant(self._tenant)
        rows = await self._read("list_api_keys", {"key_tenant": tenant})
        return [key_from_row(r["key"], from_db) for r in rows]

    async def active_keys(self) -> list[ApiKey]:
        check_key_tenant(self._tenant)
        return [key_from_row(r["key"], from_db) for r in await self._read("active_api_keys", {})]
