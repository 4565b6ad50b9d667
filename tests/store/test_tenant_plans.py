"""No query of one tenant reads every tenant's nodes: each Cypher file's plan, on Neo4j.

Several tenants share one graph. A query that finds a tenant's nodes by a label scan (or a scan of
every node, or of an index whose leading property is not `tenant`) reads the other tenants' nodes
too and filters them out: a small tenant's refresh then costs what the biggest tenant holds. Every
file under `cypher/queries` and `cypher/analytics` is EXPLAINed here (planned, never run), so a new
query that scans fails with its name.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import neo4j
import pytest
import pytest_asyncio

from tests.neo4j_server import Neo4jServer
from toolselect.records import BUDGET_SPENT
from toolselect.store.neo4j import cypher
from toolselect.store.neo4j.store import Neo4jStore

pytestmark = pytest.mark.neo4j

# Files that read every tenant's nodes on purpose, with the reason.
SCANS_ALL_TENANTS = {
    "queries/backfill_tenant": "migration: tags the nodes stored before tenants, of any tenant",
    "queries/missing_query_keys": "migration: backfills query_key on every tenant's exemplars",
    "queries/missing_used_names": "migration: backfills used_names on every tenant's turns",
}

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
TURN_ROW = {
    "id": "t-1",
    "request": "open an issue",
    "used_tool": "tool_1",
    "at": NOW.isoformat(),
    "session_id": "s-1",
    "flagged": False,
    "used_names": ["tool_1"],
}
EXEMPLAR_ROW = {
    "id": "e-1",
    "query": "open an issue",
    "query_norm": "open an issue",
    "query_key": "k-1",
    "tool": "tool_1",
    "tier": "usage",
    "embedder": "hashing",
    "embedding": b"\x00\x00\x80?",
    "created_at": NOW.isoformat(),
    "confidence": 1.0,
    "turn_id": "t-1",
    "version": 1,
    "count": 1,
}
# A plausible value for each parameter name any file uses (a map holds the fields of every
# file's rows under that name); a file with a new name fails until it is here. `OWN_PARAMS`: a
# file whose parameter of a shared name means something else.
PARAMS: dict[str, Any] = {
    "tenant": "small",
    "name": "tool_1",
    "tool": "tool_1",
    "id": "t-1",
    "ids": ["t-1", "e-1"],
    "names": ["tool_1", "ns__tool_2"],
    "bares": ["tool_1", "tool_2"],
    "tools": ["tool_1", "tool_2"],
    "keys": ["k-1", "k-2"],
    "pack": None,
    "since": None,
    "seen": NOW.isoformat(),
    "fallbacks": ["shell_exec"],
    "digest": "0" * 64,
    "turn_id": None,
    "key_tenant": None,
    "version": 1,
    "catalog": 1,
    "exemplar": 1,
    "keep": 100,
    "per_tool": 512,
    "total": 10_000,
    "exempt": ["feedback"],
    "cutoff": NOW,
    "now": NOW,
    "before": NOW.isoformat(),
    "limit": 1000,
    "spent": BUDGET_SPENT,
    "timeout_s": 1,
    "sessions": ["s-1", "s-2"],
    "turns": [TURN_ROW],
    "links": [{"tool": "tool_1", "pack": "p", "session": "s-1", "prev": None, "turn": "t-1"}],
    "tails": [{"session": "s-1", "turn": "t-1", "tools": ["tool_1"]}],
    "pairs": [{"a": "tool_1", "b": "tool_2", "count": 1}],
    "transitions": [{"src": "tool_1", "dst": "tool_2", "count": 1}],
    "rows": [
        {
            "tool": "tool_1",
            "exemplar": EXEMPLAR_ROW,
            **{k: EXEMPLAR_ROW[k] for k in ("query_key", "count", "created_at", "version")},
            "turn_id": "t-1",
            "node": "4:00000000-0000-0000-0000-000000000000:0",
            "key": "k-1",
            "names": ["tool_1"],
        }
    ],
    "call": {"id": "c-1", "turn_id": "t-1", "at": NOW, "result": "labeled", "cost_usd": 0.0},
    "key": {"id": "key-1", "hash": "h", "tenant": "small", "role": "agent", "created_at": NOW},
}
TOOL_ROW = {
    "name": "tool_1",
    "namespace": None,
    "bare_name": "tool_1",
    "description": "a tool",
    "input_schema": "{}",
    "content_hash": "h",
}
OWN_PARAMS: dict[str, dict[str, Any]] = {"queries/upsert_tools": {"tools": [TOOL_ROW]}}
_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
# The labels a plan step's details name (`e:ToolSelectionExample`), before its predicate.
_DETAILS_LABEL = re.compile(r"\b\w+:(\w+)")


def files() -> list[str]:
    """The names of the Cypher files a tenant's store and analyses run."""
    return cypher.names("queries") + cypher.names("analytics")


def parameters(name: str) -> dict[str, Any]:
    """The `PARAMS` values of the parameters `name` uses (comment lines name none)."""
    text = "\n".join(
        line for line in cypher.query(name).splitlines() if not line.lstrip().startswith("//")
    )
    used = set(_PARAM.findall(text))
    missing = sorted(used - PARAMS.keys())
    assert not missing, f"{name}: give PARAMS a plausible value for {missing}"
    return {key: PARAMS[key] for key in used} | OWN_PARAMS.get(name, {})


def operators(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """(operator, details) of every step of a plan, depth first."""
    found = [(str(plan["operatorType"]).split("@")[0], str(plan.get("args", {}).get("Details")))]
    for child in plan.get("children", []):
        found += operators(child)
    return found


def reads_every_tenant(operator: str, details: str, tenant_labels: set[str]) -> bool:
    """Whether a plan step reads other tenants' nodes: a scan of a tenant label, of all nodes or
    of a relationship type, or an index seek whose index does not lead with `tenant`."""
    if "AllNodesScan" in operator or ("Relationship" in operator and "Scan" in operator):
        return True
    labels = set(_DETAILS_LABEL.findall(details.split(" WHERE ")[0]))
    if not labels & tenant_labels:
        return False
    if "Scan" in operator:
        return True
    if "IndexSeek" in operator:
        index = re.search(r"\(([^)]*)\)", details)
        return index is None or not index.group(1).startswith("tenant")
    return False


# A big tenant beside the small one the plans are for: what makes a scan of every tenant's
# nodes costly, as in production. Without it the plans depend on what earlier tests left in the
# shared graph: on a nearly empty label a scan and a seek cost the planner alike, and it picked
# scans (of a tenant index, unfiltered) in a full run where the same files seeked when alone.
BIG_TENANT = "plans-big"
BIG_NODES = 3_000
_SEED = """
UNWIND range(1, $n) AS i
CREATE (t:Tool {tenant: $tenant, name: 'tool_' + i, bare_name: 'tool_' + i})
CREATE (u:Turn {tenant: $tenant, id: 'turn_' + i, at: datetime(), tier: 'teacher',
                used_tool: 'tool_' + i, session_id: 's_' + (i % 300)})
CREATE (e:ToolSelectionExample {tenant: $tenant, id: 'e_' + i, query_key: 'k_' + i,
                                version: i, created_at: datetime(), turn_id: 'turn_' + i})
CREATE (c:OracleCall {tenant: $tenant, id: 'c_' + i, at: datetime(), turn_id: 'turn_' + i})
CREATE (x:ExemplarTombstone {tenant: $tenant, query_key: 'x_' + i, version: i})
CREATE (m:Meta {tenant: $tenant, key: 'm_' + i})
CREATE (p:Pack {tenant: $tenant, name: 'pack_' + i})
CREATE (s:Session {tenant: $tenant, id: 's_' + i})
CREATE (e)-[:SELECTS]->(t), (t)-[:IN_PACK]->(p), (u)-[:USED]->(t), (u)-[:ESCALATED]->(c),
       (e)-[:PRODUCED]->(u), (s)-[:HAS]->(u), (t)-[:USED_WITH]->(t),
       (t)-[:FOLLOWED_BY]->(t), (u)-[:NEXT]->(u)
"""
_LABELS = "Tool|Turn|ToolSelectionExample|OracleCall|ExemplarTombstone|Meta|Pack|Session"


@pytest_asyncio.fixture(loop_scope="function")
async def driver(neo4j_server: Neo4jServer) -> AsyncIterator[neo4j.AsyncDriver]:
    """A driver on the session server, its schema migrated (plans depend on the indexes), with
    `BIG_TENANT`'s nodes in the graph and the planner's statistics and plan cache fresh."""
    # Plans of labels and properties the graph lacks would warn: no warnings for those.
    drv = neo4j.AsyncGraphDatabase.driver(
        neo4j_server.uri, auth=neo4j_server.auth, notifications_min_severity="OFF"
    )
    db = neo4j_server.database
    try:
        await Neo4jStore(drv, db).migrate()
        await drv.execute_query(_SEED, n=BIG_NODES, tenant=BIG_TENANT, database_=db)
        await drv.execute_query("CALL db.resampleOutdatedIndexes()", database_=db)
        await drv.execute_query("CALL db.awaitIndexes(60)", database_=db)
        await drv.execute_query("CALL db.clearQueryCaches()", database_=db)
        yield drv
    finally:
        await drv.execute_query(
            f"MATCH (n:{_LABELS} {{tenant: $tenant}}) DETACH DELETE n",
            tenant=BIG_TENANT,
            database_=db,
        )
        await drv.close()


async def tenant_labels(driver: neo4j.AsyncDriver, database: str) -> set[str]:
    """The labels of a tenant's data: those of the per-tenant uniqueness constraints (every node
    of them carries `tenant`; ApiKey nodes name a tenant but are global)."""
    found = await driver.execute_query(
        "SHOW CONSTRAINTS YIELD labelsOrTypes, properties WHERE properties[0] = 'tenant' "
        "RETURN DISTINCT labelsOrTypes[0] AS label",
        database_=database,
    )
    return {r["label"] for r in found.records}


async def plan_of(driver: neo4j.AsyncDriver, database: str, name: str) -> dict[str, Any]:
    # An auto-commit query: `CALL { ... } IN TRANSACTIONS` may be planned in no other.
    async with driver.session(database=database) as session:
        result = await session.run(f"EXPLAIN {cypher.query(name)}", parameters(name))
        summary = await result.consume()
    assert summary.plan is not None, name
    return dict(summary.plan)


async def test_no_query_reads_every_tenants_nodes(
    driver: neo4j.AsyncDriver, neo4j_server: Neo4jServer
) -> None:
    """Every Cypher file of queries and analytics finds a tenant's nodes by a seek of an index
    led by `tenant`: none scans a tenant label, all nodes or a relationship type, but the
    migrations listed in SCANS_ALL_TENANTS."""
    assert set(SCANS_ALL_TENANTS) <= set(files()), "a listed file no longer exists"
    labels = await tenant_labels(driver, neo4j_server.database)
    assert len(labels) == 8, labels
    scanning: dict[str, list[str]] = {}
    for name in files():
        steps = operators(await plan_of(driver, neo4j_server.database, name))
        bad = [
            f"{op} {details}" for op, details in steps if reads_every_tenant(op, details, labels)
        ]
        if bad and name not in SCANS_ALL_TENANTS:
            scanning[name] = bad
        if name in SCANS_ALL_TENANTS:
            assert bad, f"{name} scans no longer: take it off SCANS_ALL_TENANTS"
    assert scanning == {}, "\n".join(f"{n}: {b}" for n, b in scanning.items())


async def test_every_index_on_a_tenants_data_leads_with_tenant(
    driver: neo4j.AsyncDriver, neo4j_server: Neo4jServer
) -> None:
    """After migrate(), even of a store made when a single-property index served every tenant's
    nodes (`turn_at`, `exemplar_version`), each label of a tenant's data has a `tenant` index
    (what a read by the tenant alone seeks) and every index on it has `tenant` first: none a
    query could seek across tenants."""
    db = neo4j_server.database
    await driver.execute_query(
        "CREATE INDEX exemplar_version IF NOT EXISTS FOR (e:ToolSelectionExample) ON (e.version)",
        database_=db,
    )
    await driver.execute_query(
        "CREATE INDEX turn_at IF NOT EXISTS FOR (t:Turn) ON (t.at)", database_=db
    )
    await Neo4jStore(driver, db).migrate()
    labels = await tenant_labels(driver, db)
    found = await driver.execute_query(
        "SHOW INDEXES YIELD name, entityType, labelsOrTypes, properties "
        "WHERE entityType = 'NODE' AND labelsOrTypes IS NOT NULL "
        "RETURN name, labelsOrTypes[0] AS label, properties",
        database_=db,
    )
    indexes = {r["name"]: (r["label"], r["properties"]) for r in found.records}
    assert {(label, ("tenant",)) for label in labels} <= {
        (label, tuple(props)) for label, props in indexes.values()
    }
    astray = {
        name: index
        for name, index in indexes.items()
        if index[0] in labels and index[1][0] != "tenant"
    }
    assert astray == {}
