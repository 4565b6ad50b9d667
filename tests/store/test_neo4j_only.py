"""What only the Neo4j store has: schema, graph edges, connection errors, concurrency on a server.

The behaviour both stores share is pinned by test_contract.py; these tests look at the graph
itself (constraints, relationships, value types) and at the driver boundary.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import neo4j
import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from tests.neo4j_server import Neo4jServer
from toolselect.errors import InvalidInput, NotFound, StoreError, StoreUnavailable
from toolselect.records import (
    Exemplar,
    ExemplarDelta,
    OracleCall,
    Retention,
    StoreState,
    Tool,
    Turn,
    TurnsDeleted,
    UpsertResult,
)
from toolselect.store.neo4j import cypher
from toolselect.store.neo4j.connect import connect_neo4j
from toolselect.store.neo4j.store import Neo4jStore
from toolselect.store.port import lookup_one, save_one

pytestmark = pytest.mark.neo4j

# Recent enough for the default 90-day retention, in the past, with microseconds.
T0 = (datetime.now(UTC) - timedelta(days=1)).replace(microsecond=123456)

# Per tenant: (label, properties) of each uniqueness constraint.
CONSTRAINTS = {
    ("Tool", ("tenant", "name")),
    ("Pack", ("tenant", "name")),
    ("Turn", ("tenant", "id")),
    ("ToolSelectionExample", ("tenant", "id")),
    ("ToolSelectionExample", ("tenant", "query_key")),
    ("ExemplarTombstone", ("tenant", "query_key")),
    ("OracleCall", ("tenant", "id")),
    ("Meta", ("tenant", "key")),
    ("Session", ("tenant", "id")),
    ("ApiKey", ("id",)),
    ("ApiKey", ("hash",)),
}
# (label, properties) of each index no constraint owns: a tenant's nodes of each label, and by
# the properties its reads seek.
INDEXES = {
    *((label, ("tenant",)) for label, props in CONSTRAINTS if props[0] == "tenant"),
    ("Turn", ("tenant", "at")),
    ("Turn", ("tenant", "tier", "at")),
    ("Tool", ("tenant", "bare_name")),
    ("ToolSelectionExample", ("tenant", "version")),
    ("ToolSelectionExample", ("tenant", "created_at")),
    ("ToolSelectionExample", ("tenant", "turn_id")),
    ("ExemplarTombstone", ("tenant", "version")),
    ("OracleCall", ("tenant", "at")),
    ("OracleCall", ("tenant", "turn_id")),
}
HOSTILE = [
    'it\'s a "quoted" `back`tick',
    "{braces} $param ${x} \\n \\u0000",
    "MATCH (n) DETACH DELETE n // RETURN 1; DROP CONSTRAINT tool_name",
    "nul\x00inside",
    "ünïcödé 工具 🛠️ " * 200,
]


@pytest_asyncio.fixture(loop_scope="function")
async def driver(neo4j_server: Neo4jServer) -> AsyncIterator[neo4j.AsyncDriver]:
    """A driver on the session server whose database starts empty."""
    drv = neo4j.AsyncGraphDatabase.driver(neo4j_server.uri, auth=neo4j_server.auth)
    await drv.execute_query("MATCH (n) DETACH DELETE n", database_=neo4j_server.database)
    try:
        yield drv
    finally:
        await drv.close()


@pytest_asyncio.fixture(loop_scope="function")
async def store(driver: neo4j.AsyncDriver, neo4j_server: Neo4jServer) -> Neo4jStore:
    """A migrated store on the empty database."""
    result = Neo4jStore(driver, neo4j_server.database, uri=neo4j_server.uri)
    await result.migrate()
    return result


async def rows(driver: neo4j.AsyncDriver, db: str, query: Any, **params: Any) -> list[Any]:
    result = await driver.execute_query(query, params, database_=db)
    return [record.data() for record in result.records]


async def schema(driver: neo4j.AsyncDriver, db: str) -> tuple[set[Any], set[Any]]:
    constraints = await rows(
        driver, db, "SHOW CONSTRAINTS YIELD name, type, labelsOrTypes, properties"
    )
    indexes = await rows(
        driver,
        db,
        "SHOW INDEXES YIELD name, type, labelsOrTypes, properties, state, owningConstraint",
    )
    return (
        {
            (c["name"], c["type"], tuple(c["labelsOrTypes"]), tuple(c["properties"]))
            for c in constraints
        },
        {
            (
                i["name"],
                i["type"],
                tuple(i["labelsOrTypes"] or ()),
                tuple(i["properties"] or ()),
                i["state"],
            )
            for i in indexes
        },
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def exemplar(query: str, tool: str, tier: str = "teacher", **kw: Any) -> Exemplar:
    values: dict[str, Any] = {
        "id": f"ex-{query}",
        "embedder": "test-embedder",
        "embedding": (0.25, -1.5, 3.0),
        "created_at": datetime.now(UTC),
    }
    values.update(kw)
    return Exemplar(query=query, tool=tool, tier=tier, **values)  # type: ignore[arg-type]


# --- schema -------------------------------------------------------------------------------


async def test_a_tenant_exists_by_any_node_of_it(
    store: Neo4jStore, driver: neo4j.AsyncDriver, neo4j_server: Neo4jServer
) -> None:
    """`exists` is false for a tenant with no node (and asking makes none), true for one with
    a single node of any label a tenant's data has (every per-tenant constraint's), and for one
    whose store migrated (its state record alone)."""
    db = neo4j_server.database
    team = store.for_tenant("team-x")
    assert await store.exists()
    assert not await team.exists()
    keys: dict[str, list[str]] = {}  # label -> the keys its per-tenant constraints name
    for label, props in sorted(CONSTRAINTS):
        if props[0] == "tenant":
            keys.setdefault(label, []).append(props[1])
    for label, names in keys.items():
        values = ", ".join(f"{name}: 'k'" for name in names)
        await driver.execute_query(
            f"CREATE (:{label} {{tenant: $tenant, {values}}})", {"tenant": "team-x"}, database_=db
        )
        assert await team.exists(), label
        await driver.execute_query(
            "MATCH (n {tenant: $tenant}) DETACH DELETE n", {"tenant": "team-x"}, database_=db
        )
        assert not await team.exists(), label
    assert await rows(driver, db, "MATCH (n {tenant: 'team-x'}) RETURN n") == []
    await team.migrate()
    assert await team.exists()


async def test_tenant_exists_seeks_indexes_and_scans_nothing(
    store: Neo4jStore, driver: neo4j.AsyncDriver, neo4j_server: Neo4jServer
) -> None:
    """The plan of `tenant_exists` reads each label by a seek of its tenant index: no label
    scan, no scan of all nodes, however many nodes other tenants hold."""
    await store.upsert_tools([Tool(f"tool_{i}", "a tool") for i in range(200)])
    result = await driver.execute_query(
        f"EXPLAIN {cypher.query('queries/tenant_exists')}",
        {"tenant": "team-x"},
        database_=neo4j_server.database,
    )
    plan = result.summary.plan
    assert plan is not None
    operators: list[str] = []

    def walk(step: dict[str, Any]) -> None:
        operators.append(str(step["operatorType"]).split("@")[0])
        for child in step.get("children", []):
            walk(child)

    walk(plan)
    assert operators.count("NodeIndexSeek") == 8, operators
    assert not [op for op in operators if "Scan" in op], operators


async def test_migrate_creates_every_constraint_and_index(
    driver: neo4j.AsyncDriver, neo4j_server: Neo4jServer
) -> None:
    """migrate() on a bare database creates every unique constraint and index, all ONLINE."""
    db = neo4j_server.database
    await drop_schema(driver, db)
    assert (await schema(driver, db))[0] == set()

    await Neo4jStore(driver, db).migrate()

    constraints, indexes = await schema(driver, db)
    assert {(c[2][0], c[3]) for c in constraints if c[1] == "UNIQUENESS"} >= CONSTRAINTS
    assert {(i[2][0], tuple(i[3])) for i in indexes if i[1] == "RANGE" and i[2]} >= INDEXES
    assert all(i[4] == "ONLINE" for i in indexes)


async def drop_schema(driver: neo4j.AsyncDriver, db: str) -> None:
    """Every constraint and index a migration makes gone, as on a database new to toolselect."""
    constraints, indexes = await schema(driver, db)
    for name, *_ in constraints:
        await driver.execute_query(f"DROP CONSTRAINT `{name}`", database_=db)
    for name, kind, *_ in indexes:
        if kind == "RANGE":  # constraint-backed ones went with their constraints
            await driver.execute_query(f"DROP INDEX `{name}` IF EXISTS", database_=db)


async def test_processes_migrating_a_new_database_at_once_all_start(
    driver: neo4j.AsyncDriver, neo4j_server: Neo4jServer
) -> None:
    """`serve --workers 2` (or replicas started together) on a database new to toolselect: both
    run the schema at once, and `IF NOT EXISTS` does not stop the second from finding the rule
    the first made meanwhile (`EquivalentSchemaRuleAlreadyExists`). That failed one worker's
    start, and `serve` with it, 1 start in 3; the rule being there is what the statement asked."""
    db = neo4j_server.database
    other = neo4j.AsyncGraphDatabase.driver(
        neo4j_server.uri, auth=neo4j_server.auth, notifications_min_severity="OFF"
    )
    try:
        for _ in range(3):
            await drop_schema(driver, db)
            stores = [Neo4jStore(d, db, uri=neo4j_server.uri) for d in (driver, other, driver)]
            await asyncio.gather(*(store.migrate() for store in stores))
        constraints, indexes = await schema(driver, db)
        assert {(c[2][0], c[3]) for c in constraints if c[1] == "UNIQUENESS"} >= CONSTRAINTS
        assert {(i[2][0], tuple(i[3])) for i in indexes if i[1] == "RANGE" and i[2]} >= INDEXES
    finally:
        await other.close()


async def test_migrate_twice_changes_nothing(store: Neo4jStore, driver: neo4j.AsyncDriver) -> None:
    """A second migrate() succeeds and leaves constraints, indexes and versions as they were."""
    db = "neo4j"
    await store.upsert_tools([Tool("a")])
    before = await schema(driver, db), await store.state()
    await store.migrate()
    assert (await schema(driver, db), await store.state()) == before
    assert before[1] == StoreState(catalog_version=1, exemplar_version=0)
    # The lock marker of version-moving writes is never committed.
    meta = await rows(driver, db, "MATCH (m:Meta {key: 'state'}) RETURN keys(m) AS k")
    assert [sorted(r["k"]) for r in meta] == [
        ["catalog_version", "exemplar_version", "key", "tenant"]
    ]


async def test_a_reader_skips_a_migration_this_version_made(
    store: Neo4jStore, driver: neo4j.AsyncDriver, neo4j_server: Neo4jServer
) -> None:
    """A reader (the exec selector, spawned every turn) runs no schema statement on a database
    this version's files migrated, which took 80-190 ms of a ~0.6 s spawn; after a migration by
    other files (a digest it does not know) or none recorded, it migrates as a writer does."""
    db = neo4j_server.database
    reader = Neo4jStore(driver, db, uri=neo4j_server.uri)
    with capture_logs() as logs:
        await reader.migrate(reader=True)
    assert [e["statements"] for e in logs if e["event"] == "neo4j_migrated"] == [0]
    await driver.execute_query("MATCH (m:ToolselectSchema) SET m.digest = 'older'", database_=db)
    again = Neo4jStore(driver, db, uri=neo4j_server.uri)
    with capture_logs() as logs:
        await again.migrate(reader=True)
    ran = [e["statements"] for e in logs if e["event"] == "neo4j_migrated"]
    assert len(ran) == 1 and ran[0] > 0
    await driver.execute_query("MATCH (m:ToolselectSchema) DELETE m", database_=db)
    with capture_logs() as logs:
        await Neo4jStore(driver, db, uri=neo4j_server.uri).migrate(reader=True)
    assert [e["statements"] for e in logs if e["event"] == "neo4j_migrated"] == ran


async def test_embeddings_are_float32_bytes_and_old_lists_still_read(
    store: Neo4jStore, driver: neo4j.AsyncDriver
) -> None:
    """Embeddings are written as float32 bytes; one written as a list of floats by an older
    version still reads back as the same vector."""
    await store.upsert_tools([Tool("a")])
    await store.save_exemplars([exemplar("as bytes", "a"), exemplar("as list", "a")])
    stored = await rows(
        driver, "neo4j", "MATCH (e:ToolSelectionExample {query_norm: 'as bytes'}) "
        "RETURN e.embedding AS v",
    )  # fmt: skip
    assert bytes(stored[0]["v"]) == struct.pack("<3f", 0.25, -1.5, 3.0)
    await driver.execute_query(
        "MATCH (e:ToolSelectionExample {query_norm: 'as list'}) "
        "SET e.embedding = [0.25, -1.5, 3.0]",
        database_="neo4j",
    )
    found = await store.exemplars_for_queries(["as bytes", "As List"])
    assert {k: e.embedding for k, e in found.items()} == {
        "as bytes": (0.25, -1.5, 3.0),
        "as list": (0.25, -1.5, 3.0),
    }


async def test_migrate_backfills_query_keys(store: Neo4jStore, driver: neo4j.AsyncDriver) -> None:
    """Exemplars and tombstones from before `query_key` get it at migrate() and stay findable."""
    await store.upsert_tools([Tool("a")])
    await save_one(store, exemplar("Old Query", "a"))
    await driver.execute_query(
        "MATCH (n) WHERE n:ToolSelectionExample OR n:ExemplarTombstone REMOVE n.query_key",
        database_="neo4j",
    )
    await driver.execute_query(
        "CREATE (:ExemplarTombstone {query_norm: 'gone', version: 1})", database_="neo4j"
    )
    assert await lookup_one(store, "old query") is None  # unreachable by key now
    await store.migrate()
    found = await lookup_one(store, "old query")
    assert found is not None and found.tool == "a"
    missing = await rows(
        driver, "neo4j", "MATCH (n) WHERE n.query_norm IS NOT NULL AND n.query_key IS NULL "
        "RETURN count(n) AS c",
    )  # fmt: skip
    assert missing == [{"c": 0}]


async def test_migrate_backfills_used_names(store: Neo4jStore, driver: neo4j.AsyncDriver) -> None:
    """A turn that used several tools, stored before `used_names`, gets them at migrate(), so
    `cold_tools` counts its every tool again."""
    await store.upsert_tools([Tool("a"), Tool("b"), Tool("c")])
    await store.record_turns([Turn("old", "q", "a", T0, used_tools=("a", "b"), top1="a")])
    await driver.execute_query("MATCH (t:Turn) REMOVE t.used_names", database_="neo4j")
    cold = await store.analytics("cold_tools")
    assert cold.rows == (("b",), ("c",))
    await store.migrate()
    cold = await store.analytics("cold_tools")
    assert cold.rows == (("c",),)
    names = await rows(driver, "neo4j", "MATCH (t:Turn {id: 'old'}) RETURN t.used_names AS n")
    assert names == [{"n": ["a", "b"]}]


async def test_state_is_zero_on_an_empty_database(driver: neo4j.AsyncDriver) -> None:
    """state() answers 0/0 before migrate() has created the Meta node."""
    assert await Neo4jStore(driver).state() == StoreState(0, 0)


# --- connecting ---------------------------------------------------------------------------


async def test_connect_to_a_closed_port_is_unavailable() -> None:
    """connect_neo4j to a port nobody listens on raises StoreUnavailable naming the URI."""
    uri = f"bolt://127.0.0.1:{free_port()}"
    with pytest.raises(StoreUnavailable, match=f"cannot reach Neo4j at {uri}"):
        await connect_neo4j(uri, "neo4j", "", "neo4j")


async def test_connect_with_an_unknown_scheme_is_unavailable() -> None:
    """A URI whose scheme the driver does not know raises StoreUnavailable naming the URI."""
    with pytest.raises(StoreUnavailable, match=r"cannot reach Neo4j at nosuch://127\.0\.0\.1:7687"):
        await connect_neo4j("nosuch://127.0.0.1:7687", "neo4j", "", "neo4j")


async def test_connect_to_a_missing_database_is_unavailable(neo4j_server: Neo4jServer) -> None:
    """A reachable server without the named database raises StoreUnavailable, not a driver error."""
    with pytest.raises(StoreUnavailable, match="cannot reach Neo4j at"):
        await connect_neo4j(neo4j_server.uri, "neo4j", neo4j_server.password, "nosuchdb")


async def test_connect_takes_credentials_from_the_uri_and_hides_them(
    neo4j_server: Neo4jServer,
) -> None:
    """connect_neo4j accepts user:password in the URI and its store's uri carries neither."""
    host = neo4j_server.uri.split("://", 1)[1]
    store = await connect_neo4j(f"bolt://someone:s3cret@{host}", "", "", neo4j_server.database)
    try:
        await store.ping()
        assert store.uri == f"bolt://{host}"
    finally:
        await store.close()


async def test_a_failed_connect_never_shows_the_password() -> None:
    """The StoreUnavailable message of a failed connect names the URI without its password."""
    uri = f"bolt://127.0.0.1:{free_port()}"
    with pytest.raises(StoreUnavailable) as caught:
        await connect_neo4j(uri.replace("//", "//me:s3cret@"), "", "", "neo4j")
    assert uri in str(caught.value) and "s3cret" not in str(caught.value)


def test_store_uri_drops_userinfo(driver: neo4j.AsyncDriver) -> None:
    """The uri property of a store built from a URI with credentials shows host and port only."""
    store = Neo4jStore(driver, uri="neo4j+s://user:pw@db.example.com:7687?policy=eu")
    assert store.uri == "neo4j+s://db.example.com:7687?policy=eu"


async def test_operations_on_an_unreachable_server_raise_store_unavailable() -> None:
    """Every kind of call on a store whose server is gone raises StoreUnavailable."""
    uri = f"bolt://127.0.0.1:{free_port()}"
    # No retries: the driver would otherwise retry each call for 30 s before giving up.
    drv = neo4j.AsyncGraphDatabase.driver(uri, auth=None, max_transaction_retry_time=0)
    store = Neo4jStore(drv, uri=uri)
    try:
        with pytest.raises(StoreUnavailable, match=uri):
            await store.ping()
        with pytest.raises(StoreUnavailable):
            await store.list_tools()
        with pytest.raises(StoreUnavailable):
            await store.upsert_tools([Tool("a")])
        with pytest.raises(StoreUnavailable):
            await store.exemplars_since(0)
    finally:
        await store.close()


async def test_a_refused_write_raises_store_error(store: Neo4jStore) -> None:
    """An exemplar id already used by another query is refused as StoreError, not unavailability."""
    await store.upsert_tools([Tool("a")])
    await save_one(store, exemplar("first", "a", id="same-id"))
    with pytest.raises(StoreError) as caught:
        await save_one(store, exemplar("second", "a", id="same-id"))
    assert not isinstance(caught.value, StoreUnavailable)
    assert (await lookup_one(store, "first")) is not None


# --- every operation ----------------------------------------------------------------------


async def test_smoke_every_operation(store: Neo4jStore) -> None:
    """Each Store method works end to end on a real server and versions move as documented."""
    await store.ping()
    tools = [
        Tool("gh__create_issue", "Open an issue", {"type": "object", "required": ["title"]}),
        Tool("fs_read", "Read a file"),
    ]
    assert await store.upsert_tools(tools, pack="dev") == UpsertResult(2, 0, moved=True)
    assert await store.upsert_tools(tools) == UpsertResult(0, 2, moved=False)
    assert await store.state() == StoreState(1, 0)
    assert await store.upsert_tools(tools[:1], pack="ops") == UpsertResult(0, 1, moved=True)
    assert await store.state() == StoreState(2, 0)  # a pack change alone moves the catalog
    got = await store.get_tool("gh__create_issue")
    assert got == Tool(
        "gh__create_issue",
        "Open an issue",
        {"type": "object", "required": ["title"]},
        ("dev", "ops"),
    )
    assert [t.name for t in await store.list_tools()] == ["fs_read", "gh__create_issue"]
    assert [t.name for t in await store.list_tools(pack="ops")] == ["gh__create_issue"]

    turn = Turn(
        "t1", "open an issue", "gh__create_issue", T0, agent_id="ag", margin=0.02, flagged=True
    )
    assert await store.record_turns([turn]) == 1
    assert await store.record_turns([turn]) == 0
    assert await store.get_turn("t1") == turn
    assert await store.get_turn("nope") is None

    ex = exemplar("Open  an ISSUE", "gh__create_issue", turn_id="t1", created_at=T0)
    assert await save_one(store, ex)
    assert not await save_one(store, ex)
    stored = await lookup_one(store, "open an issue")
    assert stored is not None and stored.version == 1
    assert stored == Exemplar(**{**_fields(ex), "version": 1})
    assert await store.exemplars_for_tool("gh__create_issue") == [stored]
    assert await store.exemplars_since(0) == ExemplarDelta(1, (stored,), ())
    with pytest.raises(NotFound, match="unknown tool 'nope'"):
        await save_one(store, exemplar("x", "nope"))
    with pytest.raises(InvalidInput):
        await save_one(store, exemplar("x", "fs_read", tier="guess"))

    call = OracleCall("c1", "anthropic", "claude", "labeled", 12.5, T0, turn_id="t1", cost_usd=0.01)
    await store.record_oracle_call(call)
    assert await store.oracle_calls() == [call]
    assert await store.oracle_calls("t1") == [call]
    assert await store.oracle_calls("t2") == []

    assert await store.delete_exemplar(stored.id)
    assert not await store.delete_exemplar(stored.id)
    assert await store.exemplars_since(1) == ExemplarDelta(2, (), ("open an issue",))
    await save_one(store, exemplar("read it", "fs_read"))
    assert await store.delete_tool("fs_read")
    assert not await store.delete_tool("fs_read")
    assert await store.get_tool("fs_read") is None
    assert await store.state() == StoreState(3, 4)
    assert (await store.exemplars_since(3)).deleted == ("read it",)
    await store.close()


def _fields(ex: Exemplar) -> dict[str, Any]:
    return {name: getattr(ex, name) for name in Exemplar.__dataclass_fields__}


async def test_hostile_strings_round_trip_verbatim(store: Neo4jStore) -> None:
    """Quotes, backticks, braces, $, Cypher text, NUL and long unicode are stored as given."""
    for i, text in enumerate(HOSTILE):
        tool = Tool(text, text, {text: [text]})
        await store.upsert_tools([tool], pack=text)
        assert await store.get_tool(text) == Tool(text, text, {text: [text]}, (text,))
        turn = Turn(text, text, text, T0, agent_id=text, flag_reason=text)
        await store.record_turns([turn])
        assert await store.get_turn(text) == turn
        ex = exemplar(text, text, id=text, turn_id=text, embedder=text)
        assert await save_one(store, ex)
        got = await lookup_one(store, text)
        assert got is not None and (got.id, got.query, got.tool) == (text, text, text)
        call = OracleCall(text, text, text, "error", 1.0, T0, turn_id=text, error=text)
        await store.record_oracle_call(call)
        assert await store.oracle_calls(text) == [call]
        assert await store.state() == StoreState(i + 1, i + 1)
    assert {t.name for t in await store.list_tools()} == set(HOSTILE)


# --- graph model --------------------------------------------------------------------------


async def test_edges_link_turns_tools_exemplars_and_calls_in_any_order(
    store: Neo4jStore, driver: neo4j.AsyncDriver
) -> None:
    """USED, PRODUCED, ESCALATED, SELECTS and IN_PACK exist, also when the turn is recorded last."""
    await store.upsert_tools([Tool("a"), Tool("b")], pack="p")
    await store.record_oracle_call(OracleCall("c1", "x", "m", "labeled", 1.0, T0, turn_id="t1"))
    await save_one(store, exemplar("q", "a", turn_id="t1"))
    await store.record_turns([Turn("t1", "q", "b", T0), Turn("t2", "r", "unknown-tool", T0)])
    edges = await rows(
        driver,
        "neo4j",
        "MATCH (x)-[r]->(y) RETURN labels(x)[0] + '-' + type(r) + '->' + "
        "coalesce(y.name, y.id) AS edge ORDER BY edge",
    )
    assert [e["edge"] for e in edges] == [
        "Tool-IN_PACK->p",
        "Tool-IN_PACK->p",
        "ToolSelectionExample-SELECTS->a",
        "Turn-ESCALATED->c1",
        "Turn-PRODUCED->ex-q",
        "Turn-USED->b",
    ]
    # A resent turn that names another tool moves its USED edge instead of adding one.
    await store.record_turns([Turn("t1", "q", "a", T0)])
    used = await rows(driver, "neo4j", "MATCH (:Turn {id: 't1'})-[:USED]->(t) RETURN t.name AS n")
    assert used == [{"n": "a"}]
    assert await rows(driver, "neo4j", "MATCH (t:Tool) RETURN count(t) AS n") == [{"n": 2}]


async def test_a_usage_label_seen_again_is_a_count_not_a_node(
    store: Neo4jStore, driver: neo4j.AsyncDriver
) -> None:
    """Three turns use one tool for one request: one exemplar node with count 3, its embedding
    written once, linked to the turn that saw it last."""
    await store.upsert_tools([Tool("a")])
    for i in range(3):
        await store.record_turns([Turn(f"u{i}", "q", "a", T0, outcome="ok")])
        sighting = exemplar("q", "a", "usage", id=f"ex-{i}", turn_id=f"u{i}",
                            created_at=T0 + timedelta(seconds=i))  # fmt: skip
        assert (await store.save_exemplars([sighting])).changed
    found = await rows(
        driver,
        "neo4j",
        "MATCH (e:ToolSelectionExample) OPTIONAL MATCH (t:Turn)-[:PRODUCED]->(e) "
        "RETURN e.id AS id, e.count AS count, collect(t.id) AS turns",
    )
    assert found == [{"id": "ex-0", "count": 3, "turns": ["u2"]}]
    stored = await lookup_one(store, "q")
    assert stored is not None and stored.created_at == T0 + timedelta(seconds=2)


async def test_datetimes_are_zoned_and_naive_ones_read_as_utc(
    store: Neo4jStore, driver: neo4j.AsyncDriver
) -> None:
    """Times are stored as Neo4j DateTime and come back aware UTC; a naive time is taken as UTC."""
    plus_two = T0.astimezone(timezone_plus(2))
    await store.record_turns(
        [Turn("aware", "q", "a", plus_two), Turn("naive", "q", "a", T0.replace(tzinfo=None))]
    )
    kinds = await rows(driver, "neo4j", "MATCH (t:Turn) RETURN DISTINCT valueType(t.at) AS k")
    assert kinds == [{"k": "ZONED DATETIME NOT NULL"}]
    for turn_id in ("aware", "naive"):
        got = await store.get_turn(turn_id)
        assert got is not None and got.at == T0 and got.at.tzinfo == UTC


def timezone_plus(hours: int) -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=hours))


# --- scale and concurrency ----------------------------------------------------------------


async def test_ten_thousand_turns_in_one_call(store: Neo4jStore, driver: neo4j.AsyncDriver) -> None:
    """record_turns takes 10,000 turns at once; resending them updates without duplicates."""
    await store.upsert_tools([Tool("a")])
    turns = [Turn(f"t{i}", f"request {i}", "a", T0) for i in range(10_000)]
    assert await store.record_turns(turns) == 10_000
    assert await store.record_turns([*turns[:10], Turn("t0", "changed", "a", T0)]) == 0
    counted = await rows(
        driver,
        "neo4j",
        "MATCH (t:Turn) OPTIONAL MATCH (t)-[u:USED]->() "
        "RETURN count(DISTINCT t) AS n, count(u) AS u",
    )
    assert counted == [{"n": 10_000, "u": 10_000}]
    got = await store.get_turn("t0")
    assert got is not None and got.request == "changed"


async def test_concurrent_saves_get_unique_consecutive_versions(store: Neo4jStore) -> None:
    """Saves racing on one driver (distinct and equal queries) get versions 1..n, none shared."""
    await store.upsert_tools([Tool("a"), Tool("b")])
    saves = [exemplar(f"query {i}", "a") for i in range(16)]
    saves += [
        exemplar("contested", tool, tier, id=f"c-{tool}-{tier}")
        for tool in "ab"
        for tier in ("ranker", "teacher")
    ]
    changed = await asyncio.gather(*(save_one(store, e) for e in saves))
    state = await store.state()
    delta = await store.exemplars_since(0)
    assert state.exemplar_version == sum(changed)
    versions = [e.version for e in delta.upserted]
    assert versions == sorted(set(versions)) and versions[-1] <= state.exemplar_version
    contested = await lookup_one(store, "contested")
    assert contested is not None and contested.tier == "teacher"


async def test_retention_evicts_oldest_and_tombstones_them(
    store: Neo4jStore, driver: neo4j.AsyncDriver
) -> None:
    """Beyond per_tool the oldest non-feedback exemplar goes, tombstoned at the version of the
    save that evicted it (one version per save call)."""
    small = Neo4jStore(driver, retention=Retention(per_tool=2, total=100, max_age_days=30))
    await small.upsert_tools([Tool("a")])
    now = datetime.now(UTC)
    await save_one(
        small, exemplar("old feedback", "a", "feedback", created_at=now - timedelta(days=400))
    )
    for i in range(3):
        await save_one(small, exemplar(f"q{i}", "a", created_at=now - timedelta(hours=3 - i)))
    left = [e.query for e in await small.exemplars_for_tool("a")]
    assert left == ["q2", "q1", "old feedback"]
    delta = await small.exemplars_since(3)
    assert delta.version == 4 and delta.deleted == ("q0",)
    tomb = await rows(
        driver, "neo4j", "MATCH (ts:ExemplarTombstone) RETURN ts.query_norm AS q, ts.version AS v"
    )
    assert tomb == [{"q": "q0", "v": 4}]


async def waiting(driver: neo4j.AsyncDriver, n: int) -> None:
    """Return once `n` transactions wait on a lock (fail after 10 s): `Blocked` on one a
    statement takes, or `Closing` on one its commit takes (a relationship's end nodes)."""
    query = (
        "SHOW TRANSACTIONS YIELD status "
        "WHERE status STARTS WITH 'Blocked' OR status = 'Closing' RETURN count(*) AS n"
    )
    for _ in range(200):
        if (await rows(driver, "neo4j", query))[0]["n"] >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"expected {n} transactions waiting on a lock")


async def sessions(driver: neo4j.AsyncDriver) -> list[Any]:
    query = (
        "MATCH (s:Session) OPTIONAL MATCH (s)-[:HAS]->(t:Turn) "
        "RETURN s.id AS id, s.last_turn AS last, collect(t.id) AS turns"
    )
    return await rows(driver, "neo4j", query)


async def test_retention_keeps_a_session_a_writer_moved_on(
    store: Neo4jStore, driver: neo4j.AsyncDriver
) -> None:
    """Retention deleting a session's old last turn while a writer holds the session and makes
    a new turn its last: retention waits for it, reads the last turn again under the session's
    lock and keeps the session, with its new tail and HAS edge."""
    await store.upsert_tools([Tool("a"), Tool("c")])
    await store.record_turns([Turn("old", "old", "c", T0 - timedelta(days=200), session_id="r")])
    async with driver.session(database="neo4j") as held:
        blocker = await held.begin_transaction()
        # The writer's commit waits for `a` (its turn's USED edge), the session locked and its
        # new tail set.
        await (await blocker.run("MATCH (t:Tool {name: 'a'}) SET t._lock = true")).consume()
        writer = asyncio.create_task(
            store.record_turns([Turn("new", "new", "a", T0, session_id="r")])
        )
        await waiting(driver, 1)
        retention = asyncio.create_task(store.delete_turns(T0 - timedelta(days=90), 10))
        await waiting(driver, 2)
        await blocker.rollback()
    assert await writer == 1
    assert await retention == TurnsDeleted(turns=1)
    assert await sessions(driver) == [{"id": "r", "last": "new", "turns": ["new"]}]


async def test_a_writer_of_a_session_retention_deleted_starts_it_afresh(
    store: Neo4jStore, driver: neo4j.AsyncDriver
) -> None:
    """A writer of a session that retention deletes meanwhile waits for it, then finds no
    tail: its turn starts a new session record, linked to no deleted turn."""
    await store.upsert_tools([Tool("a"), Tool("c")])
    old = T0 - timedelta(days=200)
    await store.record_turns(
        [Turn("old", "old", "c", old, session_id="r"), Turn("kept", "kept", "c", T0)]
    )
    await store.record_oracle_call(
        OracleCall("call", "anthropic", "m", "labeled", 1.0, old, turn_id="kept")
    )
    async with driver.session(database="neo4j") as held:
        blocker = await held.begin_transaction()
        # Retention's commit waits for `kept` (the old call's edge), the session deleted.
        await (await blocker.run("MATCH (t:Turn {id: 'kept'}) SET t._lock = true")).consume()
        retention = asyncio.create_task(store.delete_turns(T0 - timedelta(days=90), 10))
        await waiting(driver, 1)
        writer = asyncio.create_task(
            store.record_turns([Turn("new", "new", "a", T0, session_id="r")])
        )
        await waiting(driver, 2)
        await blocker.rollback()
    assert await retention == TurnsDeleted(turns=1, calls=1, sessions=1)
    assert await writer == 1
    assert await sessions(driver) == [{"id": "r", "last": "new", "turns": ["new"]}]
    assert await rows(driver, "neo4j", "MATCH (:Turn)-[n:NEXT]->(:Turn) RETURN n") == []


async def test_tenant_stores_share_the_driver_and_migrate_the_schema_once(
    neo4j_server: Neo4jServer,
) -> None:
    """`for_tenant` stores run on the first store's driver: their `migrate` runs no schema
    statement once it ran (only their own state record), each sees its own data, and closing
    one leaves the driver, and the others, working; closing the first closes the driver."""
    first = await connect_neo4j(
        neo4j_server.uri, neo4j_server.username, neo4j_server.password, neo4j_server.database
    )
    with capture_logs() as logs:
        await first.migrate()
        team = first.for_tenant("team-a")
        await team.migrate()
    statements = [e["statements"] for e in logs if e["event"] == "neo4j_migrated"]
    assert statements[0] > 0 and statements[1] == 0
    assert team.tenant == "team-a" and team.uri == first.uri
    await team.upsert_tools([Tool("search_a", "only team-a's")])
    assert "search_a" not in {t.name for t in await first.list_tools()}
    await team.close()
    await first.ping()
    other = first.for_tenant("team-b")
    await other.migrate()
    assert await other.list_tools() == []
    await first.close()
    with pytest.raises(StoreError):
        await other.ping()
