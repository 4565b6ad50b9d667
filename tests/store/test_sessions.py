"""Sessions in the store, on every store: turns recorded with a session id are linked in order,
and the tools they used are counted together (one turn) and in sequence (the next turn of the
session), once per turn however often it is resent (`store/session_rules.plan_sessions`)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.store.conftest import StoreFactory
from toolselect.keys import DEFAULT_TENANT
from toolselect.records import Retention, Tool, Turn
from toolselect.store.port import Store
from toolselect.store.sqlite.store import SqliteStore

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)

Facts = tuple[
    set[tuple[str, str]], set[tuple[str, str]], dict[tuple[str, str], int], dict[Any, int]
]


def turn(turn_id: str, minute: int, *tools: str, session: str | None = "s1") -> Turn:
    return Turn(
        id=turn_id,
        request=f"request {turn_id}",
        used_tool=tools[0],
        at=T0 + timedelta(minutes=minute),
        session_id=session,
        used_tools=tools if len(tools) > 1 else (),
    )


async def facts(store: Store) -> Facts:
    """(session, turn) links, (prev, next) links, pair counts and transition counts, as stored."""
    if isinstance(store, SqliteStore):

        def read(conn: sqlite3.Connection) -> Facts:
            has = conn.execute("SELECT session_id, id FROM turns WHERE session_id IS NOT NULL")
            nexts = conn.execute("SELECT prev, next FROM turn_next")
            pairs = conn.execute("SELECT a, b, count FROM tool_pairs")
            steps = conn.execute("SELECT src, dst, count FROM tool_transitions")
            return (
                {(r[0], r[1]) for r in has},
                {(r[0], r[1]) for r in nexts},
                {(r[0], r[1]): r[2] for r in pairs},
                {(r[0], r[1]): r[2] for r in steps},
            )

        return await store._run(read)
    driver: Any = store._driver  # type: ignore[attr-defined]
    database = store._database  # type: ignore[attr-defined]

    async def query(text: str) -> list[Any]:
        return list((await driver.execute_query(text, database_=database)).records)

    has = await query("MATCH (s:Session)-[:HAS]->(t:Turn) RETURN s.id, t.id")
    nexts = await query("MATCH (p:Turn)-[:NEXT]->(t:Turn) RETURN p.id, t.id")
    pairs = await query("MATCH (a:Tool)-[r:USED_WITH]->(b:Tool) RETURN a.name, b.name, r.count")
    steps = await query("MATCH (a:Tool)-[r:FOLLOWED_BY]->(b:Tool) RETURN a.name, b.name, r.count")
    return (
        {(r[0], r[1]) for r in has},
        {(r[0], r[1]) for r in nexts},
        {(r[0], r[1]): r[2] for r in pairs},
        {(r[0], r[1]): r[2] for r in steps},
    )


async def catalog(store: Store, *names: str) -> None:
    await store.upsert_tools([Tool(name=n, description=f"does {n}") for n in names])


async def test_turns_of_a_session_link_in_order_and_count_their_tools(store: Store) -> None:
    await catalog(store, "a", "b", "c")
    first = [turn("t2", 1, "b", "c", "a"), turn("t1", 0, "a", "b")]
    assert await store.record_turns(first) == 2
    assert await store.record_turns([turn("t3", 2, "c"), turn("x1", 0, "a", session="s2")]) == 2
    has, nexts, pairs, steps = await facts(store)
    assert has == {("s1", "t1"), ("s1", "t2"), ("s1", "t3"), ("s2", "x1")}
    assert nexts == {("t1", "t2"), ("t2", "t3")}
    assert pairs == {("a", "b"): 2, ("a", "c"): 1, ("b", "c"): 1}
    assert steps == {
        ("a", "a"): 1, ("a", "b"): 1, ("a", "c"): 2, ("b", "a"): 1, ("b", "b"): 1,
        ("b", "c"): 2, ("c", "c"): 1,
    }  # fmt: skip


async def test_a_resent_turn_counts_once(store: Store) -> None:
    await catalog(store, "a", "b")
    await store.record_turns([turn("t1", 0, "a", "b"), turn("t2", 1, "b")])
    before = await facts(store)
    # The labeller records a turn the teacher finished again; and a batch may repeat an id.
    assert await store.record_turns([turn("t2", 1, "b"), turn("t1", 0, "a", "b")]) == 0
    assert await store.record_turns([turn("t3", 2, "a"), turn("t3", 2, "a")]) == 1
    has, nexts, pairs, steps = await facts(store)
    assert (has, nexts, pairs) == (
        before[0] | {("s1", "t3")},
        before[1] | {("t2", "t3")},
        before[2],
    )
    assert pairs == {("a", "b"): 1}
    assert steps == {("a", "b"): 1, ("b", "b"): 1, ("b", "a"): 1}


async def test_a_turn_older_than_its_sessions_last_joins_without_a_step(store: Store) -> None:
    """A turn recorded after a later one of its session (replayed from a spool after an
    outage): in the session, but not chained after the later turn nor counted as a step from
    it; the session goes on from the later turn."""
    await catalog(store, "a", "b", "c")
    await store.record_turns([turn("t2", 2, "b")])
    await store.record_turns([turn("t1", 1, "a")])
    await store.record_turns([turn("t3", 3, "c")])
    has, nexts, _, steps = await facts(store)
    assert has == {("s1", "t1"), ("s1", "t2"), ("s1", "t3")}
    assert nexts == {("t2", "t3")}
    assert steps == {("b", "c"): 1}


async def test_a_turn_after_an_idle_gap_starts_its_session_afresh(
    store_factory: StoreFactory,
) -> None:
    """A turn more than the store's `session_idle_s` after its session's last recorded turn
    (stored before, or earlier in its batch) joins the session without a `NEXT` from that turn
    and counts no step from it; the session goes on from it. An hour to the second is no gap."""
    store = await store_factory.make(retention=Retention(session_idle_s=3600.0))
    await catalog(store, "a", "b", "c")
    await store.record_turns([turn("t1", 0, "a")])
    await store.record_turns([turn("t2", 61, "b")])  # 61 minutes after t1: expired
    await store.record_turns([turn("t3", 62, "c"), turn("t4", 130, "a"), turn("t5", 190, "b")])
    has, nexts, _, steps = await facts(store)
    assert has == {("s1", f"t{i}") for i in range(1, 6)}
    assert nexts == {("t2", "t3"), ("t4", "t5")}
    assert steps == {("b", "c"): 1, ("a", "b"): 1}
    tail = (await store.session_tails(["s1"])).get("s1")
    assert tail is not None and (tail.turn_id, tail.tools) == ("t5", ("b",))
    transitions = await store.analytics("tool_transitions")
    assert [(r[0], r[1], r[2]) for r in transitions.rows] == [("a", "b", 1), ("b", "c", 1)]


async def test_a_sessions_tail_is_its_last_recorded_turn(store: Store) -> None:
    """`session_tails`: each session's last turn recorded, with its catalog tools and time, in
    one read; a session with no turn recorded is absent."""
    await catalog(store, "a", "b")
    await store.record_turns([turn("t1", 0, "a"), turn("t2", 1, "b", "zz")])
    await store.record_turns([turn("t3", 2, "a", session="s2")])
    tails = await store.session_tails(["s1", "s9", "s2"])
    assert sorted(tails) == ["s1", "s2"]
    assert (tails["s1"].turn_id, tails["s1"].tools) == ("t2", ("b",))
    assert tails["s1"].at == T0 + timedelta(minutes=1)
    assert (tails["s2"].turn_id, tails["s2"].tools) == ("t3", ("a",))
    assert await store.session_tails([]) == {}


async def test_a_turn_of_unknown_tools_counts_nothing(store: Store) -> None:
    await catalog(store, "a")
    await store.record_turns([turn("t1", 0, "zz", "yy"), turn("t2", 1, "a", "zz")])
    await store.record_turns([turn("t3", 2, "qq")])
    has, nexts, pairs, steps = await facts(store)
    assert has == {("s1", "t1"), ("s1", "t2"), ("s1", "t3")}
    assert nexts == {("t1", "t2"), ("t2", "t3")}
    assert pairs == {} and steps == {}


async def test_turns_without_a_session_count_pairs_only(store: Store) -> None:
    await catalog(store, "a", "b")
    await store.record_turns(
        [turn("t1", 0, "a", "b", session=None), turn("t2", 1, "b", session=None)]
    )
    has, nexts, pairs, steps = await facts(store)
    assert (has, nexts, pairs, steps) == (set(), set(), {("a", "b"): 1}, {})


async def test_a_deleted_tool_takes_its_counts_along(store: Store) -> None:
    await catalog(store, "a", "b", "c")
    await store.record_turns([turn("t1", 0, "a", "b"), turn("t2", 1, "c")])
    assert await store.delete_tool("b")
    await store.record_turns([turn("t3", 2, "a")])
    _, _, pairs, steps = await facts(store)
    assert pairs == {}
    assert steps == {("a", "c"): 1, ("c", "a"): 1}


async def test_retention_keeps_each_tools_top_counts(store_factory: StoreFactory) -> None:
    store = await store_factory.make(retention=Retention(relations_per_tool=1))
    await catalog(store, "a", "b", "c", "d")
    turns = [
        turn("t1", 0, "a", "b"),
        turn("t2", 1, "a", "b", "c"),
        turn("t3", 2, "a", "d"),
        turn("t4", 3, "b"),
    ]
    await store.record_turns(turns)
    _, _, pairs, steps = await facts(store)
    # Counted: pairs ab 2, ac 1, ad 1, bc 1; steps aa 2, ab 2, ac 1, ad 1, ba 2, bb 1, bc 1,
    # bd 1, ca 1, cd 1, db 1. Each tool keeps its top one, ties by the other tool's name.
    assert pairs == {("a", "b"): 2, ("a", "c"): 1, ("a", "d"): 1}
    assert steps == {("a", "a"): 2, ("b", "a"): 2, ("c", "a"): 1, ("d", "b"): 1}


async def test_a_new_relation_is_not_locked_out_by_older_ties(
    store_factory: StoreFactory,
) -> None:
    """Past a tool's `relations_per_tool` counts, among equal counts the most recently counted
    stays, then the other tool's name: a new follower of `a` whose name sorts after the ones
    `a` already has enters (the oldest tie goes), and seen again it counts 2. With the name
    alone deciding ties it was dropped at every write, its count never past 1."""
    store = await store_factory.make(retention=Retention(relations_per_tool=2))
    await catalog(store, "a", "b", "c", "z")
    await store.record_turns([turn("t1", 0, "a"), turn("t2", 1, "b")])
    await store.record_turns([turn("u1", 0, "a", session="s2"), turn("u2", 1, "c", session="s2")])
    _, _, _, steps = await facts(store)
    assert {k: n for k, n in steps.items() if k[0] == "a"} == {("a", "b"): 1, ("a", "c"): 1}
    await store.record_turns([turn("v1", 2, "a", session="s3"), turn("v2", 3, "z", session="s3")])
    _, _, _, steps = await facts(store)
    assert {k: n for k, n in steps.items() if k[0] == "a"} == {("a", "b"): 1, ("a", "z"): 1}
    await store.record_turns([turn("w1", 4, "a", session="s4"), turn("w2", 5, "z", session="s4")])
    _, _, _, steps = await facts(store)
    assert {k: n for k, n in steps.items() if k[0] == "a"} == {("a", "b"): 1, ("a", "z"): 2}


async def test_session_turns_are_the_most_recent_with_a_session(store: Store) -> None:
    """What the session fit reads: turns with a session, newest first (time, then id), at most
    `limit`; turns without a session are left out, and all fields come back as recorded."""
    await catalog(store, "a", "b", "c")
    await store.record_turns(
        [
            turn("t1", 0, "a", "b"),
            turn("t2", 1, "c"),
            turn("u1", 2, "a", session=None),
            turn("x2", 3, "b", session="s2"),
            turn("x1", 3, "a", session="s2"),
        ]
    )
    newest = await store.session_turns(10)
    assert [t.id for t in newest] == ["x2", "x1", "t2", "t1"]
    assert [t.id for t in await store.session_turns(2)] == ["x2", "x1"]
    assert await store.session_turns(0) == []
    first = newest[-1]
    assert (first.session_id, first.used_tool, first.used_tools) == ("s1", "a", ("a", "b"))
    assert first.at == T0 and first.request == "request t1"


@pytest.mark.reopens
async def test_two_writers_of_one_session_keep_one_chain(store_factory: StoreFactory) -> None:
    """Two replicas record turns of the same sessions at once: each session stays one chain (no
    turn followed or preceded twice, each link forward in time) with one transition counted
    per link; a turn that lands after a later one of its session is in it without a link."""
    first = await store_factory.make()
    second = await store_factory.tenant(DEFAULT_TENANT)
    await catalog(first, "a", "b")
    sessions, length = 12, 6
    await asyncio.gather(
        *(
            (first, second)[i % 2].record_turns(
                [turn(f"s{s}-t{i}", i, "ab"[i % 2], session=f"s{s}")]
            )
            for i in range(length)
            for s in range(sessions)
        )
    )
    has, nexts, _, steps = await facts(first)
    assert len(has) == sessions * length
    assert max(Counter(prev for prev, _ in nexts).values()) == 1
    assert max(Counter(nxt for _, nxt in nexts).values()) == 1
    assert 0 < len(nexts) == sum(steps.values()) <= sessions * (length - 1)
    assert all(int(prev.rsplit("-t", 1)[1]) < int(nxt.rsplit("-t", 1)[1]) for prev, nxt in nexts)
