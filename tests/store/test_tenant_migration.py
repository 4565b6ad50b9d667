"""Stores written before tenants existed become the `default` tenant's, in place: a SQLite file
is the default tenant's file as it is; a Neo4j database of the old shape (nodes without
`tenant`, single-property uniqueness constraints) is migrated by `migrate()` and answers as it
did, and from then on another tenant may use the same names and ids."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import neo4j
import pytest
import pytest_asyncio

from tests.neo4j_server import Neo4jServer
from tests.store.test_analytics import EXEMPLARS, KEEP_ALL, TURNS
from tests.store.test_tenants import NOW, OTHER, analyses, seed
from toolselect.config import Settings
from toolselect.keys import new_key
from toolselect.store.factory import open_store
from toolselect.store.neo4j.store import Neo4jStore
from toolselect.store.port import Store
from toolselect.store.sqlite.store import SqliteStore

# `cypher/schema/constraints.cypher` before tenants: what a database made then holds.
OLD_CONSTRAINTS = (
    "CREATE CONSTRAINT tool_name FOR (t:Tool) REQUIRE t.name IS UNIQUE",
    "CREATE CONSTRAINT pack_name FOR (p:Pack) REQUIRE p.name IS UNIQUE",
    "CREATE CONSTRAINT turn_id FOR (t:Turn) REQUIRE t.id IS UNIQUE",
    "CREATE CONSTRAINT exemplar_id FOR (e:ToolSelectionExample) REQUIRE e.id IS UNIQUE",
    "CREATE CONSTRAINT exemplar_query_key "
    "FOR (e:ToolSelectionExample) REQUIRE e.query_key IS UNIQUE",
    "CREATE CONSTRAINT tombstone_query_key "
    "FOR (ts:ExemplarTombstone) REQUIRE ts.query_key IS UNIQUE",
    "CREATE CONSTRAINT oracle_call_id FOR (c:OracleCall) REQUIRE c.id IS UNIQUE",
    "CREATE CONSTRAINT meta_key FOR (m:Meta) REQUIRE m.key IS UNIQUE",
    "CREATE CONSTRAINT session_id FOR (s:Session) REQUIRE s.id IS UNIQUE",
)
OLD_NAMES = {statement.split()[2] for statement in OLD_CONSTRAINTS}
TENANT_LABELS = (
    "Tool",
    "Pack",
    "Turn",
    "ToolSelectionExample",
    "ExemplarTombstone",
    "OracleCall",
    "Meta",
    "Session",
)


async def answers(store: Store) -> Any:
    """Everything a store answers about the analytics data set."""
    tools = await store.list_tools()
    return (
        tools,
        await store.state(),
        {t.name: await store.exemplars_for_tool(t.name) for t in tools},
        await store.exemplars_for_queries([e.query for e in EXEMPLARS]),
        await store.exemplars_since(0),
        [await store.get_turn(t.id) for t in TURNS],
        await store.session_turns(1000),
        await store.oracle_calls(),
        await analyses(store),
    )


async def test_an_existing_sqlite_file_is_the_default_tenant(tmp_path: Path) -> None:
    """A file written by a store without tenants opens, through the factory, as the `default`
    tenant's with all its data; another tenant's store is a file of its own and starts empty."""
    db = tmp_path / "toolselect.db"
    old = SqliteStore(db, retention=KEEP_ALL)
    await old.migrate()
    await seed(old)
    await old.save_key(new_key(OTHER, "agent", NOW)[1])
    before = await answers(old)
    await old.close()
    settings = Settings(store=f"sqlite:{db}", data_dir=str(tmp_path), exemplar_max_age_days=100_000)
    default = await open_store(settings)
    other = await open_store(settings, tenant="acme")
    try:
        await default.migrate()
        await other.migrate()
        assert (default.tenant, default.uri) == ("default", f"sqlite:{db}")
        assert await answers(default) == before
        assert [k.tenant for k in await default.list_keys()] == [OTHER]
        assert other.uri == f"sqlite:{tmp_path / 'toolselect.tenant-acme.db'}"
        assert await other.list_tools() == [] and await other.session_turns(10) == []
        assert all(not rows for rows in (await analyses(other)).values())
    finally:
        await default.close()
        await other.close()


@pytest_asyncio.fixture(loop_scope="function")
async def driver(neo4j_server: Neo4jServer) -> AsyncIterator[neo4j.AsyncDriver]:
    """A driver on the session server whose database starts empty."""
    drv = neo4j.AsyncGraphDatabase.driver(neo4j_server.uri, auth=neo4j_server.auth)
    await drv.execute_query("MATCH (n) DETACH DELETE n", database_=neo4j_server.database)
    try:
        yield drv
    finally:
        await drv.close()


async def query(driver: neo4j.AsyncDriver, db: str, text: Any) -> list[dict[str, Any]]:
    return [r.data() for r in (await driver.execute_query(text, database_=db)).records]


async def to_old_shape(driver: neo4j.AsyncDriver, db: str) -> None:
    """Make the database what a store before tenants left: no node has `tenant` (keys keep
    theirs: a key's tenant is a field of the key), the old constraints and indexes."""
    await driver.execute_query("MATCH (n) WHERE NOT n:ApiKey REMOVE n.tenant", database_=db)
    for row in await query(driver, db, "SHOW CONSTRAINTS YIELD name, labelsOrTypes"):
        if row["labelsOrTypes"][0] in TENANT_LABELS:
            await driver.execute_query(f"DROP CONSTRAINT `{row['name']}`", database_=db)
    await driver.execute_query("DROP INDEX turn_tenant_at IF EXISTS", database_=db)
    for statement in OLD_CONSTRAINTS:
        await driver.execute_query(statement, database_=db)


@pytest.mark.neo4j
async def test_a_neo4j_database_of_before_tenants_migrates_into_default(
    driver: neo4j.AsyncDriver, neo4j_server: Neo4jServer
) -> None:
    """migrate() on a database of the old shape puts every node in tenant `default` (keys keep
    theirs), replaces the old constraints with per-tenant ones, and the store answers exactly as
    before; another tenant can then store the same names and ids, and a second migrate() changes
    nothing."""
    db = neo4j_server.database
    written = Neo4jStore(driver, db, retention=KEEP_ALL)
    await written.migrate()
    await seed(written)
    key = new_key(OTHER, "agent", NOW)[1]
    await written.save_key(key)
    before = await answers(written)
    await to_old_shape(driver, db)
    # The schema's record is the database's, not a tenant's (nor a key's).
    untagged = "MATCH (n) WHERE n.tenant IS NULL AND NOT n:ToolselectSchema RETURN count(n) AS n"
    data = await query(
        driver, db, "MATCH (n) WHERE NOT n:ApiKey AND NOT n:ToolselectSchema RETURN count(n) AS n"
    )
    assert await query(driver, db, untagged) == data and data[0]["n"] > len(TURNS)

    default = Neo4jStore(driver, db, retention=KEEP_ALL)
    await default.migrate()

    assert await query(driver, db, untagged) == [{"n": 0}]
    tenants = "MATCH (n) WHERE NOT n:ApiKey RETURN collect(DISTINCT n.tenant) AS t"
    assert await query(driver, db, tenants) == [{"t": ["default"]}]
    constraints = await query(driver, db, "SHOW CONSTRAINTS YIELD name, properties")
    assert not OLD_NAMES & {c["name"] for c in constraints}
    assert {tuple(c["properties"]) for c in constraints} >= {("tenant", "name"), ("tenant", "id")}
    assert await answers(default) == before
    assert [(k.id, k.tenant) for k in await default.list_keys()] == [(key.id, OTHER)]

    other = Neo4jStore(driver, db, retention=KEEP_ALL, tenant=OTHER)
    await other.migrate()
    await seed(other)  # every tool name, turn, call and exemplar id again
    assert await analyses(other) == before[-1]
    await default.migrate()
    assert await answers(default) == before
