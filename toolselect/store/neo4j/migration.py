"""The Neo4j store's schema, and the data migrations stores of older versions need; all of it
runs at `Neo4jStore.migrate()` and is idempotent.

Order matters: nodes stored before tenants existed first get tenant `default`
(`queries/backfill_tenant`, in transactions of 10000 nodes), so that every node of a tenant's
data is covered by the per-tenant constraints `schema/constraints.cypher` then puts in place of
the single-property ones; exemplars and tombstones stored before `query_key` get theirs last,
and turns stored before `used_names` (the list `cold_tools` reads) theirs.
Driver errors are translated by the caller.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

from neo4j import AsyncDriver
from neo4j.exceptions import ClientError

from toolselect.keys import DEFAULT_TENANT
from toolselect.store.neo4j import cypher
from toolselect.store.neo4j.tx import q, query_key


class Once:
    """Whether this process migrated the database yet: once for all the stores that share a
    driver (`Neo4jStore.for_tenant`), not once per tenant's start."""

    def __init__(self) -> None:
        self.ready = False
        self._lock = asyncio.Lock()

    async def migrate(self, driver: AsyncDriver, database: str, *, again: bool) -> int:
        """`migrate` unless done already (or `again`: the driver's own store, at each of its
        starts); the schema statements run (0 when done)."""
        async with self._lock:
            if self.ready and not again:
                return 0
            count = await migrate(driver, database)
            self.ready = True
            return count


# The files a migration runs: what it made is current while their text is unchanged.
_MIGRATION_QUERIES: tuple[str, ...] = (
    "backfill_tenant",
    "missing_query_keys",
    "set_query_keys",
    "missing_used_names",
    "set_used_names",
    "await_indexes",
)


def digest() -> str:
    """SHA-256 of the schema files and the migration's queries, as this version has them."""
    files = [*cypher.names("schema"), *(f"queries/{name}" for name in _MIGRATION_QUERIES)]
    text = "\0".join(f"{name}\0{cypher.query(name)}" for name in files)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def current(driver: AsyncDriver, database: str) -> bool:
    """Whether the database was migrated by these very files (`digest`): a reader, which may
    not write, then need not run them (about 50 statements, 80-190 ms of a spawn)."""
    records, _, _ = await driver.execute_query(q("schema_digest"), database_=database)
    return any(record["digest"] == digest() for record in records)


async def migrate(driver: AsyncDriver, database: str) -> int:
    """Migrate old data, create constraints and indexes, wait for them, then record the
    files' `digest`; the schema statements run."""
    await backfill_tenant(driver, database)
    count = 0
    for name in cypher.names("schema"):
        for statement in cypher.statements(name):
            await _schema_rule(driver, database, statement)
            count += 1
    await driver.execute_query(q("await_indexes"), {"timeout_s": 300}, database_=database)
    await backfill_query_keys(driver, database)
    await backfill_used_names(driver, database)
    await driver.execute_query(q("set_schema_digest"), {"digest": digest()}, database_=database)
    return count


async def _schema_rule(driver: AsyncDriver, database: str, statement: str) -> None:
    """One `CREATE ... IF NOT EXISTS` of the schema. Processes migrating at once (`serve
    --workers`, replicas started together on a new database) race to make each rule, and
    `IF NOT EXISTS` does not stop the loser from finding the rule made meanwhile: it raises
    `EquivalentSchemaRuleAlreadyExists`, which failed that process's start. The rule being
    there is what the statement asked for."""
    try:
        await driver.execute_query(statement, database_=database)
    except ClientError as exc:
        if exc.code != "Neo.ClientError.Schema.EquivalentSchemaRuleAlreadyExists":
            raise


async def backfill_tenant(driver: AsyncDriver, database: str) -> int:
    """Give every node of tenant data without a tenant (stored before tenants) tenant
    `default`; how many were given it. An auto-commit query: `IN TRANSACTIONS` needs one."""
    async with driver.session(database=database) as session:
        result = await session.run(q("backfill_tenant"), {"tenant": DEFAULT_TENANT})
        summary = await result.consume()
    return summary.counters.properties_set


async def backfill_query_keys(driver: AsyncDriver, database: str) -> None:
    """Give exemplars and tombstones of older stores their `query_key` (hashed here, since
    Cypher has no SHA-256)."""
    while True:
        records, _, _ = await driver.execute_query(q("missing_query_keys"), database_=database)
        if not records:
            return
        rows = [{"node": r["node"], "key": query_key(r["query_norm"])} for r in records]
        await driver.execute_query(q("set_query_keys"), {"rows": rows}, database_=database)


async def backfill_used_names(driver: AsyncDriver, database: str) -> None:
    """Give turns of older stores that used several tools their `used_names` (parsed here from
    the `used_tools` JSON text, since Cypher has no JSON reader)."""
    while True:
        records, _, _ = await driver.execute_query(q("missing_used_names"), database_=database)
        if not records:
            return
        rows = [{"node": r["node"], "names": json.loads(r["used_tools"])} for r in records]
        await driver.execute_query(q("set_used_names"), {"rows": rows}, database_=database)
