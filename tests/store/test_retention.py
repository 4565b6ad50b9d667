"""The retention pass without a write, on every store: turns past their age go a bounded batch
at a time (with their teacher calls, session links and the sessions they were the last turn of,
never their labels), and labels past theirs expire without a save, moving the exemplar version
only when something went."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from typing import Any

import pytest

from tests.store.conftest import StoreFactory
from tests.store.test_contract import NOW, call, exemplar, seed_tools, turn
from tests.store.test_sessions import facts
from toolselect.analytics.registry import ANALYSES
from toolselect.records import Retention, TurnsDeleted
from toolselect.store.port import Store
from toolselect.store.rules import evictions, retention_plan
from toolselect.store.sqlite.store import SqliteStore

CUTOFF = NOW - timedelta(days=30)
OLD = NOW - timedelta(days=40)
# The analyses `since` applies to (the tool counts are all-time aggregates, never of turns).
WINDOWED = [n for n in ANALYSES if n not in ("tool_pairs", "tool_transitions")]


async def seed_history(store: Store) -> None:
    """Five old turns (two of a session running across the cutoff) and four recent ones, labels
    made from an old and a recent turn, teacher calls for both sides."""
    await seed_tools(store, "fs_read", "search", "email")
    old = [
        turn(f"old-{i}", at=OLD + timedelta(minutes=i), used_tool="search", flagged=True,
             tier="teacher", result="labeled", label="email")
        for i in range(3)
    ]  # fmt: skip
    recent = [
        turn(f"new-{i}", at=NOW - timedelta(days=1, minutes=-i), used_tool="email", flagged=True,
             tier="teacher", result="labeled", label="search")
        for i in range(3)
    ]  # fmt: skip
    await store.record_turns(old)
    # One session: two old turns, then a recent one (its step crosses the cutoff).
    session = [
        turn("old-s1", at=OLD + timedelta(hours=1), used_tool="search", session_id="s"),
        turn("old-s2", at=OLD + timedelta(hours=2), used_tool="email", session_id="s"),
        turn("new-s3", at=NOW - timedelta(hours=1), used_tool="fs_read", session_id="s"),
    ]
    await store.record_turns(session)
    await store.record_turns(recent)
    await store.save_exemplars(
        [
            exemplar("an old request", "email", "teacher", turn_id="old-0"),
            exemplar("a recent request", "email", "usage", turn_id="new-0"),
        ]
    )
    for i in range(3):
        await store.record_oracle_call(call(f"c-old-{i}", OLD + timedelta(minutes=i), f"old-{i}"))
    await store.record_oracle_call(call("c-new", NOW - timedelta(days=1), "new-0"))


async def stored_sessions(store: Store) -> dict[str, str]:
    """Each stored session record's last turn, as stored: SQLite's `sessions` rows, Neo4j's
    `Session` nodes (a tail the port reads could hide a record left behind)."""
    if isinstance(store, SqliteStore):

        def read(conn: sqlite3.Connection) -> dict[str, str]:
            return dict(conn.execute("SELECT id, last_turn FROM sessions").fetchall())

        return await store._run(read)
    driver: Any = store._driver  # type: ignore[attr-defined]
    found = await driver.execute_query(
        "MATCH (s:Session) RETURN s.id AS id, s.last_turn AS last",
        database_=store._database,  # type: ignore[attr-defined]
    )
    return {r["id"]: r["last"] for r in found.records}


async def snapshot(store: Store) -> dict[str, object]:
    """Everything a reader of the kept window sees: the analyses since the cutoff, the tool
    counts, the labels and the versions."""
    seen: dict[str, object] = {n: (await store.analytics(n, CUTOFF)).rows for n in WINDOWED}
    for name in ("tool_pairs", "tool_transitions"):
        seen[name] = (await store.analytics(name)).rows
    seen["labels"] = sorted((e.query, e.turn_id) for e in await store.exemplars_for_tool("email"))
    seen["state"] = await store.state()
    return seen


async def test_turns_past_their_age_go_in_bounded_batches(store_factory: StoreFactory) -> None:
    """Each call deletes at most `limit` old turns and `limit` old teacher calls; the recent
    ones, the labels made from deleted turns, the tool counts, the versions and every analysis
    of the kept window are as they were."""
    store = await store_factory.make()
    await seed_history(store)
    before = await snapshot(store)
    # The kept window holds a teacher call and its cost (not a vacuous comparison).
    usage = (await store.analytics("oracle_usage", CUTOFF)).rows
    assert [(tier, calls) for tier, _, _, calls, *_ in usage] == [("teacher", 1)]
    # 5 old turns (3 plain + 2 of the session), 3 old calls, by batches of 2.
    assert [await store.delete_turns(CUTOFF, 2) for _ in range(4)] == [
        TurnsDeleted(turns=2, calls=2),
        TurnsDeleted(turns=2, calls=1),
        TurnsDeleted(turns=1),
        TurnsDeleted(),
    ]
    assert await store.delete_turns(CUTOFF, 2) == TurnsDeleted()
    stored = await store.recorded_turn_ids(
        ["old-0", "old-1", "old-2", "old-s1", "old-s2", "new-0", "new-1", "new-2", "new-s3"]
    )
    assert stored == {"new-0", "new-1", "new-2", "new-s3"}
    assert [c.id for c in await store.oracle_calls()] == ["c-new"]
    assert await snapshot(store) == before
    assert await store.get_turn("old-0") is None


async def test_a_batch_counts_turns_and_calls_apart(store_factory: StoreFactory) -> None:
    """A batch that took fewer than `limit` of each kind leaves nothing old behind: the caller
    stops when neither kind filled its limit (`TurnsDeleted.full`), sessions counting for
    nothing."""
    store = await store_factory.make()
    await seed_history(store)
    await store.record_turns([turn("old-g", at=OLD, session_id="g")])
    # 6 old turns, 3 old calls and the session of one: 10 records, each kind under 7.
    gone = await store.delete_turns(CUTOFF, 7)
    assert gone == TurnsDeleted(turns=6, calls=3, sessions=1) and not gone.full(7)
    assert await store.delete_turns(CUTOFF, 7) == TurnsDeleted()
    assert await store.delete_turns(CUTOFF, 0) == TurnsDeleted()
    assert TurnsDeleted(turns=7).full(7) and TurnsDeleted(calls=7).full(7)
    assert not TurnsDeleted().full(0)


async def test_a_session_continues_after_its_old_turns_went(store_factory: StoreFactory) -> None:
    """The session keeps its last turn and the tool counts theirs; its next turn links and
    counts a step from the last one, as if nothing had gone."""
    store = await store_factory.make()
    await seed_history(store)
    await store.delete_turns(CUTOFF, 100)
    tail = (await store.session_tails(["s"])).get("s")
    assert tail is not None and tail.turn_id == "new-s3" and tail.tools == ("fs_read",)
    steps = (await store.analytics("tool_transitions")).rows
    await store.record_turns([turn("new-s4", at=NOW, used_tool="search", session_id="s")])
    tail = (await store.session_tails(["s"])).get("s")
    assert tail is not None and tail.turn_id == "new-s4"
    after = {(s, d): n for s, d, n, _ in (await store.analytics("tool_transitions")).rows}
    assert after[("fs_read", "search")] == 1 + sum(
        n for s, d, n, _ in steps if (s, d) == ("fs_read", "search")
    )
    assert [t.id for t in await store.session_turns(10)] == ["new-s4", "new-s3"]


async def test_a_session_goes_with_its_last_turn(store_factory: StoreFactory) -> None:
    """A session whose last turn is past the age goes with it (no record left: no row, no
    node); one whose last turn is kept stays with its tail, though its older turns went."""
    store = await store_factory.make()
    await seed_history(store)
    await store.record_turns([turn("old-g", at=OLD, used_tool="search", session_id="g")])
    assert await stored_sessions(store) == {"s": "new-s3", "g": "old-g"}
    await store.delete_turns(CUTOFF, 100)
    assert await stored_sessions(store) == {"s": "new-s3"}
    assert (await store.session_tails(["g"])).get("g") is None
    tail = (await store.session_tails(["s"])).get("s")
    assert tail is not None and (tail.turn_id, tail.tools) == ("new-s3", ("fs_read",))


async def test_sessions_go_in_bounded_batches(store_factory: StoreFactory) -> None:
    """Batches of one turn, taken in any order, leave no session whose turns all went, even
    one whose last turn went before its earlier ones; the session with a kept turn stays."""
    store = await store_factory.make()
    await seed_history(store)
    await store.record_turns(
        [turn(f"old-g{i}", at=OLD + timedelta(minutes=i), session_id="g") for i in range(3)]
    )
    batches = []
    while (gone := await store.delete_turns(CUTOFF, 1)).full(1):
        batches.append(gone)
    assert all(b.turns == 1 and b.sessions <= 1 for b in batches)
    assert sum(b.turns for b in batches) == 8 and sum(b.sessions for b in batches) == 1
    assert await stored_sessions(store) == {"s": "new-s3"}


@pytest.mark.parametrize("idle_s", [3600.0, 0.0])
async def test_a_session_whose_last_turn_went_starts_afresh(
    store_factory: StoreFactory, idle_s: float
) -> None:
    """The next turn of a session whose last turn went starts it anew, as the gap (longer
    than the turns' age) would have decided: no link to the deleted turn, no step from its
    tools, the new turn its tail; so it does when sessions never expire (`session_idle_s` 0),
    where the record left behind lent the deleted turn's tools a step."""
    store = await store_factory.make(Retention(session_idle_s=idle_s))
    await seed_tools(store, "fs_read", "search")
    await store.record_turns([turn("gone-1", at=OLD, used_tool="fs_read", session_id="g")])
    await store.delete_turns(CUTOFF, 100)
    await store.record_turns([turn("gone-2", at=NOW, used_tool="search", session_id="g")])
    has, nexts, _, steps = await facts(store)
    assert (has, nexts, steps) == ({("g", "gone-2")}, set(), {})
    assert await stored_sessions(store) == {"g": "gone-2"}
    tail = (await store.session_tails(["g"])).get("g")
    assert tail is not None and (tail.turn_id, tail.tools) == ("gone-2", ("search",))
    assert [t.id for t in await store.session_turns(10)] == ["gone-2"]


async def test_labels_past_their_age_expire_without_a_save(store_factory: StoreFactory) -> None:
    """`expire_exemplars` evicts what a save's retention would (`evictions` of the plan without
    tools), leaves a tombstone each at one new version, spares a human's label, and moves
    nothing when nothing is due."""
    store = await store_factory.make(Retention(max_age_days=10))
    await seed_tools(store, "t")
    labels = [
        exemplar(f"aging {tier}", "t", tier, at=NOW)
        for tier in ("ranker", "usage", "teacher", "feedback")
    ]
    labels.append(exemplar("fresh ranker", "t", "ranker", at=NOW + timedelta(days=5)))
    await store.save_exemplars(labels)
    held = await store.exemplars_for_tool("t")
    version = (await store.state()).exemplar_version

    assert await store.expire_exemplars(NOW + timedelta(days=9)) == 0
    assert (await store.state()).exemplar_version == version

    later = NOW + timedelta(days=11)
    want = evictions(retention_plan(Retention(max_age_days=10), later, ()), held)
    assert await store.expire_exemplars(later) == 3 == len(want)
    assert (await store.state()).exemplar_version == version + 1
    delta = await store.exemplars_since(version)
    assert sorted(delta.deleted) == sorted(e.query_norm for e in want)
    assert [e.query for e in await store.exemplars_for_tool("t")] == [
        "fresh ranker",
        "aging feedback",
    ]
    assert await store.expire_exemplars(later) == 0
    assert (await store.state()).exemplar_version == version + 1
