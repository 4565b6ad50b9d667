"""Tenants in the store, on every store: two tenants' views of one database (Neo4j) or file
family (SQLite) never see, change or count each other's tools, labels, turns, sessions, oracle
calls, versions or analyses, though they use the same names and ids; API keys live with the
`default` tenant only."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.neo4j_server import NEO4J, Neo4jServer
from tests.store.conftest import StoreFactory
from tests.store.test_analytics import CALLS, EXEMPLARS, KEEP_ALL, TOOLS, TURNS
from toolselect.analytics.registry import NAMES
from toolselect.errors import InvalidInput, StoreError
from toolselect.keys import new_key
from toolselect.records import Exemplar, OracleCall, Retention, Tier, Tool, Turn
from toolselect.store.port import Store, save_one
from toolselect.store.sqlite.store import SqliteStore

NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
OTHER = "team-b"


def label(
    query: str, tool: str, tier: Tier = "teacher", *, ex_id: str, at: datetime = NOW
) -> Exemplar:
    return Exemplar(
        id=ex_id,
        query=query,
        tool=tool,
        tier=tier,
        embedder="hashing-v1",
        embedding=(0.5, -0.25),
        created_at=at,
    )


def turn(
    turn_id: str, request: str, *tools: str, session: str | None = None, at: datetime = NOW
) -> Turn:
    return Turn(
        id=turn_id,
        request=request,
        used_tool=tools[0],
        at=at,
        session_id=session,
        used_tools=tools if len(tools) > 1 else (),
    )


def call(call_id: str, turn_id: str, model: str) -> OracleCall:
    return OracleCall(
        id=call_id,
        provider="anthropic",
        model=model,
        result="labeled",
        latency_ms=10.0,
        at=NOW,
        turn_id=turn_id,
        input_tokens=1,
        output_tokens=1,
        cost_usd=0.001,
    )


async def pair(
    store_factory: StoreFactory, retention: Retention | None = None
) -> tuple[Store, Store]:
    """The `default` tenant's store and tenant `team-b`'s, on the same database or files."""
    a = await store_factory.make(retention=retention)
    b = await store_factory.tenant(OTHER, retention=retention)
    assert (a.tenant, b.tenant) == ("default", OTHER)
    return a, b


async def analyses(store: Store) -> dict[str, Any]:
    return {name: (await store.analytics(name)).rows for name in NAMES}


async def test_the_same_tool_names_stay_apart(store_factory: StoreFactory) -> None:
    """A tool name in two tenants is two tools: upsert, list, get, packs and delete in one leave
    the other's as it was."""
    a, b = await pair(store_factory)
    assert (await a.upsert_tools([Tool("fs_read", "A reads")])).upserted == 1
    assert (
        await b.upsert_tools([Tool("fs_read", "B reads"), Tool("b_only", "b")], "p")
    ).upserted == 2
    got_a, got_b = await a.get_tool("fs_read"), await b.get_tool("fs_read")
    assert got_a is not None and (got_a.description, got_a.packs) == ("A reads", ())
    assert got_b is not None and (got_b.description, got_b.packs) == ("B reads", ("p",))
    assert [t.name for t in await a.list_tools()] == ["fs_read"]
    assert await a.list_tools("p") == [] and await a.get_tool("b_only") is None
    listed_b = await b.list_tools()
    assert await a.delete_tool("fs_read") and not await a.delete_tool("b_only")
    assert await a.list_tools() == [] and await b.list_tools() == listed_b
    assert await b.list_tools("p") == listed_b


async def test_the_same_query_keeps_one_label_per_tenant(store_factory: StoreFactory) -> None:
    """The same query labelled with different tools (and the same exemplar id) in two tenants
    keeps both labels; each tenant's lookups, tool lists and deltas show its own only."""
    a, b = await pair(store_factory)
    for store in (a, b):
        await store.upsert_tools([Tool("x", "x"), Tool("y", "y")])
    assert await save_one(a, label("Find files", "x", "feedback", ex_id="ex-1"))
    assert await save_one(b, label("find  FILES", "y", "ranker", ex_id="ex-1"))
    got_a = await a.exemplars_for_queries(["find files"])
    got_b = await b.exemplars_for_queries(["find files"])
    assert (got_a["find files"].tool, got_a["find files"].tier) == ("x", "feedback")
    assert (got_b["find files"].tool, got_b["find files"].tier) == ("y", "ranker")
    assert [e.tool for e in await a.exemplars_for_tool("x")] == ["x"]
    assert await a.exemplars_for_tool("y") == [] and await b.exemplars_for_tool("x") == []
    assert [e.query for e in (await b.exemplars_since(0)).upserted] == ["find  FILES"]
    assert [e.query for e in (await a.exemplars_since(0)).upserted] == ["Find files"]
    # A's feedback label does not block B's upgrade, nor is it replaced by it.
    assert await save_one(b, label("find files", "x", "teacher", ex_id="ex-2"))
    assert (await a.exemplars_for_queries(["find files"]))["find files"].id == "ex-1"
    assert await a.delete_exemplar("ex-1")
    assert (await b.exemplars_for_queries(["find files"]))["find files"].id == "ex-2"
    assert (await b.exemplars_since(0)).deleted == ()


async def test_versions_move_per_tenant(store_factory: StoreFactory) -> None:
    """Saves, deletions and evictions in one tenant never move the other's versions, nor show
    in its deltas; each tenant counts its versions from 0."""
    a, b = await pair(store_factory, Retention(per_tool=1))
    await b.upsert_tools([Tool("x", "x")])
    await save_one(b, label("b query", "x", "ranker", ex_id="b-1"))
    state_b = await b.state()
    assert (state_b.catalog_version, state_b.exemplar_version) == (1, 1)
    await a.upsert_tools([Tool("x", "x"), Tool("z", "z")])
    assert (await a.state()).catalog_version == 1
    await save_one(a, label("one", "x", "ranker", ex_id="a-1", at=NOW - timedelta(minutes=1)))
    result = await a.save_exemplars([label("two", "x", "ranker", ex_id="a-2")])
    assert result.evicted == 1  # per_tool=1: A's older label goes, never B's
    await a.delete_exemplar("a-2")
    await save_one(a, label("three", "z", ex_id="a-3"))
    await a.delete_tool("z")
    assert await b.state() == state_b
    delta = await b.exemplars_since(state_b.exemplar_version)
    assert (delta.upserted, delta.deleted) == ((), ())
    assert [e.id for e in await b.exemplars_for_tool("x")] == ["b-1"]


async def test_the_same_turn_id_is_two_turns(store_factory: StoreFactory) -> None:
    """A turn id recorded in two tenants is two turns, each new to its tenant; a resend is
    counted (as not new) in its own tenant only."""
    a, b = await pair(store_factory)
    assert await a.record_turns([turn("t1", "a's request", "fs_read")]) == 1
    assert await b.record_turns([turn("t1", "b's request", "web")]) == 1
    assert await a.record_turns([turn("t1", "a's again", "fs_read")]) == 0
    got_a, got_b = await a.get_turn("t1"), await b.get_turn("t1")
    assert got_a is not None and got_a.request == "a's again"
    assert got_b is not None and (got_b.request, got_b.used_tool) == ("b's request", "web")
    assert await b.get_turn("t2") is None


async def test_sessions_pairs_and_transitions_per_tenant(store_factory: StoreFactory) -> None:
    """The same session id in two tenants is two sessions: a turn of B's never links to A's
    last turn, and tools used together or in sequence count in their own tenant only."""
    a, b = await pair(store_factory)
    for store in (a, b):
        await store.upsert_tools([Tool(n, n) for n in ("p", "q", "r")])
    await a.record_turns([turn("t1", "a1", "p", "q", session="s1")])
    await a.record_turns([turn("t2", "a2", "q", session="s1", at=NOW + timedelta(minutes=1))])
    await b.record_turns([turn("t1", "b1", "r", session="s1", at=NOW + timedelta(minutes=2))])
    await b.record_turns([turn("t9", "b2", "p", "r", session="s1", at=NOW + timedelta(minutes=3))])
    pairs_a = (await a.analytics("tool_pairs")).rows
    pairs_b = (await b.analytics("tool_pairs")).rows
    assert pairs_a == (("p", "q", 1),) and pairs_b == (("p", "r", 1),)
    steps_a = {(r[0], r[1], r[2]) for r in (await a.analytics("tool_transitions")).rows}
    steps_b = {(r[0], r[1], r[2]) for r in (await b.analytics("tool_transitions")).rows}
    assert steps_a == {("p", "q", 1), ("q", "q", 1)}
    assert steps_b == {("r", "p", 1), ("r", "r", 1)}
    assert [t.request for t in await a.session_turns(10)] == ["a2", "a1"]
    assert [t.request for t in await b.session_turns(10)] == ["b2", "b1"]


async def test_oracle_calls_per_tenant(store_factory: StoreFactory) -> None:
    """The same call id traced in two tenants is two calls, each listed (all, or by turn) and
    linked to its own tenant's turn only."""
    a, b = await pair(store_factory)
    flagged = Turn(id="t1", request="r", used_tool="x", at=NOW, flagged=True, tier="teacher")
    for store, model in ((a, "model-a"), (b, "model-b")):
        await store.record_oracle_call(call("c1", "t1", model))  # before its turn: linked later
        await store.record_turns([flagged])
    await a.record_oracle_call(call("c2", "t1", "model-a"))
    listed = [(c.id, c.model) for c in await a.oracle_calls()]
    assert listed == [("c1", "model-a"), ("c2", "model-a")]
    assert [(c.id, c.model) for c in await b.oracle_calls("t1")] == [("c1", "model-b")]
    assert [(c.id, c.model) for c in await b.oracle_calls()] == [("c1", "model-b")]
    usage_a = (await a.analytics("oracle_usage")).rows
    usage_b = (await b.analytics("oracle_usage")).rows
    assert [(r[0], r[2], r[3]) for r in usage_a] == [("teacher", 1, 2)]
    assert [(r[0], r[2], r[3]) for r in usage_b] == [("teacher", 1, 1)]


async def seed(store: Store) -> None:
    """The analytics data set (`tests/store/test_analytics.py`) into one store."""
    await store.upsert_tools([Tool(name, f"does {name}") for name in TOOLS])
    await store.record_turns(TURNS)
    for traced in CALLS:
        await store.record_oracle_call(traced)
    for ex in EXEMPLARS:
        assert await save_one(store, ex)
    assert await store.delete_exemplar("e10")


async def test_every_analysis_of_b_is_unchanged_by_a(store_factory: StoreFactory) -> None:
    """Every registered analysis of tenant B answers the same before and after tenant A writes
    the very same data set (every name and id colliding) and more; A's answers then equal B's."""
    a, b = await pair(store_factory, KEEP_ALL)
    await seed(b)
    before = await analyses(b)
    assert any(before.values())
    await seed(a)
    assert await analyses(a) == before
    await a.record_turns([turn("t99", "more", "fs_read", "send_email", session="s1")])
    await a.delete_tool("search_web")
    await a.record_oracle_call(call("c1", "t99", "another"))
    assert await analyses(b) == before
    assert await analyses(a) != before


async def test_keys_live_with_the_default_tenant(store_factory: StoreFactory) -> None:
    """Another tenant's store refuses every key method; the default one keeps keys of every
    tenant as before."""
    a, b = await pair(store_factory)
    key = new_key(OTHER, "agent", NOW)[1]
    with pytest.raises(StoreError, match="keys live in the 'default' tenant's store"):
        await b.save_key(key)
    for attempt in (b.list_keys(), b.list_keys(OTHER), b.active_keys(), b.revoke_key(key.id)):
        with pytest.raises(StoreError, match="keys live in the 'default' tenant's store"):
            await attempt
    await a.save_key(key)
    assert [k.id for k in await a.list_keys(OTHER)] == [key.id]


def test_a_tenant_id_is_checked_and_names_its_file(tmp_path: Path) -> None:
    """A store refuses a malformed tenant id before any I/O; a SQLite tenant's file sits beside
    the configured one (`<stem>.tenant-<id><suffix>`), the default tenant's is the file itself."""
    with pytest.raises(InvalidInput, match="expected a tenant id"):
        SqliteStore(tmp_path / "toolselect.db", tenant="Team A")
    default = SqliteStore(tmp_path / "toolselect.db")
    other = SqliteStore(tmp_path / "toolselect.db", tenant="acme")
    memory = SqliteStore(Path(":memory:"), tenant="acme")
    assert default.uri == f"sqlite:{tmp_path / 'toolselect.db'}"
    assert other.uri == f"sqlite:{tmp_path / 'toolselect.tenant-acme.db'}"
    assert (memory.uri, memory.tenant, default.tenant) == ("sqlite::memory:", "acme", "default")


# --- interleavings -------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One write of one tenant (0 or 1): a tool, a label or a turn."""

    kind: str
    tenant: int
    key: str
    value: str
    extra: str


OPS = st.lists(
    st.one_of(
        st.builds(
            Op,
            st.just("tool"),
            st.integers(0, 1),
            st.sampled_from("abc"),
            st.sampled_from(["one", "two"]),
            st.just(""),
        ),
        st.builds(
            Op,
            st.just("label"),
            st.integers(0, 1),
            st.sampled_from(["q1", "Q1 ", "q2"]),
            st.sampled_from("abc"),
            st.sampled_from(["ranker", "usage", "teacher"]),
        ),
        st.builds(
            Op,
            st.just("turn"),
            st.integers(0, 1),
            st.sampled_from(["t1", "t2"]),
            st.sampled_from("ab"),
            st.sampled_from(["", "s1"]),
        ),
    ),
    max_size=12,
)


async def apply(store: Store, op: Op, n: int) -> None:
    """Apply `op`, the `n`-th write of its tenant (which fixes its ids and times)."""
    at = NOW + timedelta(seconds=n)
    if op.kind == "tool":
        await store.upsert_tools([Tool(op.key, f"{op.key} {op.value}")])
    elif op.kind == "label":
        tier: Tier = (
            "teacher" if op.extra == "teacher" else "usage" if op.extra == "usage" else "ranker"
        )
        await store.save_exemplars([label(op.key, op.value, tier, ex_id=f"ex-{n}", at=at)])
    else:
        await store.record_turns(
            [turn(op.key, f"request {n}", op.value, session=op.extra or None, at=at)]
        )


async def reads(store: Store) -> Any:
    """What a tenant's store answers about its tools, labels, turns, sessions and versions."""
    labels = await store.exemplars_for_queries(["q1", "q2"])
    return (
        await store.list_tools(),
        await store.state(),
        {q: (e.id, e.tool, e.tier, e.version) for q, e in labels.items()},
        [await store.get_turn(t) for t in ("t1", "t2")],
        await store.session_turns(20),
        (await store.analytics("tool_transitions")).rows,
        (await store.analytics("misroute_rate")).rows,
    )


async def interleave(backend: str, folder: Path, server: Neo4jServer | None, ops: list[Op]) -> None:
    """Run `ops` on two tenants of one database and, as the reference, on two private
    in-memory stores (one per tenant); each tenant must read as its reference does."""
    factory = StoreFactory(backend, folder, server)
    alone = [SqliteStore(Path(":memory:")), SqliteStore(Path(":memory:"))]
    try:
        shared = [await factory.make(), await factory.tenant(OTHER)]
        for store in alone:
            await store.migrate()
        counts = [0, 0]
        for op in ops:
            counts[op.tenant] += 1
            await apply(shared[op.tenant], op, counts[op.tenant])
            await apply(alone[op.tenant], op, counts[op.tenant])
        for tenant in (0, 1):
            assert await reads(shared[tenant]) == await reads(alone[tenant])
    finally:
        for store in alone:
            await store.close()
        await factory.aclose()


@pytest.mark.parametrize("backend", ["sqlite", "memory", NEO4J])
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_interleaved_tenants_read_as_if_alone(
    backend: str,
    ops: list[Op],
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Any interleaving of two tenants' writes (tools, labels, turns with sessions) leaves each
    tenant reading exactly what a store holding only its own writes reads."""
    server = request.getfixturevalue("neo4j_server") if backend == "neo4j" else None
    asyncio.run(interleave(backend, tmp_path_factory.mktemp("tenants"), server, ops))
