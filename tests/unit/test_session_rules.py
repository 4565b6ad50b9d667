"""The session rules (`store/session_rules.plan_sessions`) both stores apply when turns are recorded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from toolselect.names import CatalogNames
from toolselect.records import Turn
from toolselect.store.session_rules import (
    SessionTail,
    kept_relations,
    plan_sessions,
    session_expired,
    touches_sessions,
    turn_tools,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KNOWN = CatalogNames({"a", "b", "c"})


def turn(turn_id: str, minute: int, *tools: str, session: str | None = "s1", **kw: Any) -> Turn:
    return Turn(
        id=turn_id,
        request=f"request {turn_id}",
        used_tool=tools[0],
        at=T0 + timedelta(minutes=minute),
        session_id=session,
        used_tools=tools if len(tools) > 1 else (),
        **kw,
    )


def test_turn_tools_are_used_tools_else_the_used_tool() -> None:
    assert turn_tools(turn("t", 0, "a")) == ("a",)
    assert turn_tools(turn("t", 0, "a", "b")) == ("a", "b")


def test_a_batch_chains_by_time_then_id_and_counts_pairs_and_transitions() -> None:
    turns = [turn("t3", 2, "c"), turn("t1", 0, "a", "b"), turn("t2", 1, "b", "c", "a")]
    plan = plan_sessions(turns, {}, KNOWN, idle_s=0.0)
    assert plan.links == (("s1", None, "t1"), ("s1", "t1", "t2"), ("s1", "t2", "t3"))
    assert dict(plan.pairs) == {("a", "b"): 2, ("a", "c"): 1, ("b", "c"): 1}
    assert dict(plan.transitions) == {
        ("a", "a"): 1, ("a", "b"): 1, ("a", "c"): 2, ("b", "a"): 1, ("b", "b"): 1,
        ("b", "c"): 2, ("c", "c"): 1,
    }  # fmt: skip
    assert plan.tails == {"s1": SessionTail("t3", ("c",))}


def test_a_session_continues_from_its_stored_tail() -> None:
    plan = plan_sessions([turn("t9", 5, "b")], {"s1": SessionTail("t8", ("a",))}, KNOWN, idle_s=0.0)
    assert plan.links == (("s1", "t8", "t9"),)
    assert dict(plan.transitions) == {("a", "b"): 1}
    assert dict(plan.pairs) == {}


def test_unknown_tools_count_nothing_and_sessionless_turns_are_not_linked() -> None:
    plan = plan_sessions(
        [turn("t1", 0, "zz", "a"), turn("t2", 1, "a", "b", session=None), turn("t3", 2, "zz")],
        {},
        KNOWN,
        idle_s=0.0,
    )
    assert plan.links == (("s1", None, "t1"), ("s1", "t1", "t3"))
    assert dict(plan.pairs) == {("a", "b"): 1}
    assert dict(plan.transitions) == {}
    assert plan.tails == {"s1": SessionTail("t3", ())}


def test_nothing_new_plans_nothing() -> None:
    plan = plan_sessions([], {"s1": SessionTail("t1", ("a",))}, KNOWN, idle_s=0.0)
    assert plan.links == () and not plan.pairs and not plan.transitions and not plan.tails


def test_a_turn_older_than_the_stored_tail_is_linked_without_a_step() -> None:
    tail = SessionTail("t8", ("a",), T0 + timedelta(minutes=5))
    plan = plan_sessions([turn("t7", 4, "b"), turn("t9", 6, "c")], {"s1": tail}, KNOWN, idle_s=0.0)
    assert plan.links == (("s1", None, "t7"), ("s1", "t8", "t9"))
    assert dict(plan.transitions) == {("a", "c"): 1}
    assert plan.tails == {"s1": SessionTail("t9", ("c",))}
    late = plan_sessions([turn("t7", 4, "b")], {"s1": tail}, KNOWN, idle_s=0.0)
    assert late.links == (("s1", None, "t7"),) and not late.transitions
    assert late.tails == {"s1": tail}


def test_a_turn_after_an_idle_gap_starts_its_session_afresh() -> None:
    """A turn more than `idle_s` after its session's last one (stored or in the batch) joins
    the session without following it or counting a step from it, and is its last turn from
    then on; one exactly `idle_s` after it still follows it. Without a limit, no gap; without a
    time (its last turn deleted by retention), always one."""
    tail = SessionTail("t8", ("a",), T0)
    turns = [turn("t9", 61, "b"), turn("t10", 62, "c"), turn("t11", 122, "a")]
    plan = plan_sessions(turns, {"s1": tail}, KNOWN, idle_s=3600.0)
    assert plan.links == (("s1", None, "t9"), ("s1", "t9", "t10"), ("s1", "t10", "t11"))
    assert dict(plan.transitions) == {("b", "c"): 1, ("c", "a"): 1}
    assert plan.tails == {"s1": SessionTail("t11", ("a",))}
    later = plan_sessions([turn("t12", 183, "b")], plan.tails, KNOWN, idle_s=3600.0)
    assert later.links == (("s1", None, "t12"),) and not later.transitions
    untimed = plan_sessions([turn("t12", 183, "b")], {"s1": SessionTail("t11", ("a",))}, KNOWN,
                            idle_s=3600.0)  # fmt: skip
    assert untimed.links == (("s1", None, "t12"),) and not untimed.transitions
    assert session_expired(T0, T0 + timedelta(seconds=3600.5), 3600.0)
    assert not session_expired(T0, T0 + timedelta(seconds=3600), 3600.0)
    assert session_expired(None, T0, 3600.0)  # its last turn deleted by retention
    assert not session_expired(None, T0, 0.0)
    assert not session_expired(T0, T0 + timedelta(days=9), 0.0)


def test_a_tail_tool_no_longer_in_the_catalog_counts_nothing() -> None:
    plan = plan_sessions(
        [turn("t9", 5, "b")], {"s1": SessionTail("t8", ("gone", "a"))}, KNOWN, idle_s=0.0
    )
    assert dict(plan.transitions) == {("a", "b"): 1}


def test_a_reported_name_counts_as_the_catalog_tool_it_stands_for() -> None:
    """`mcp__srv__read` and the bare `read` count as the catalog's `srv__read`, and
    `mcp__a__search` as `a__search` though `b__search` shares its bare name; the bare `search`
    two tools share counts nothing (the learner's rule)."""
    catalog = CatalogNames({"srv__read", "srv__write", "a__search", "b__search"})
    turns = [
        turn("t1", 0, "mcp__srv__read", "write"),
        turn("t2", 1, "read", "mcp__a__search"),
        turn("t3", 2, "search", "srv__write"),
    ]
    plan = plan_sessions(turns, {}, catalog, idle_s=0.0)
    assert dict(plan.pairs) == {("srv__read", "srv__write"): 1, ("a__search", "srv__read"): 1}
    assert plan.tails == {"s1": SessionTail("t3", ("srv__write",))}
    assert dict(plan.transitions) == {
        ("srv__read", "a__search"): 1, ("srv__read", "srv__read"): 1,
        ("srv__write", "a__search"): 1, ("srv__write", "srv__read"): 1,
        ("a__search", "srv__write"): 1, ("srv__read", "srv__write"): 1,
    }  # fmt: skip


def test_retention_keeps_each_tools_top_relations() -> None:
    steps = {("a", "b"): 3, ("a", "c"): 1, ("a", "d"): 1, ("b", "a"): 1}
    assert kept_relations(steps, 2, pairs=False) == {("a", "b"), ("a", "c"), ("b", "a")}
    # a's top two are (a, b) and (a, c); d keeps (a, d), its only pair.
    pairs = {("a", "b"): 3, ("a", "c"): 2, ("a", "d"): 1, ("b", "c"): 1}
    assert kept_relations(pairs, 2, pairs=True) == set(pairs)
    assert kept_relations(pairs, 1, pairs=True) == {("a", "b"), ("a", "c"), ("a", "d")}
    assert kept_relations(pairs, 0, pairs=True) == set()


def test_among_equal_counts_the_most_recently_counted_stays() -> None:
    """Ties go to the relation counted last (`seen`), one never seen being oldest, then to the
    other tool's name: a new follower is not locked out by older ties that sort before it."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    steps = {("a", "b"): 1, ("a", "c"): 1, ("a", "z"): 1, ("a", "y"): 2}
    seen = {("a", "b"): t0, ("a", "z"): t0 + timedelta(minutes=1), ("a", "y"): t0}
    assert kept_relations(steps, 2, pairs=False, seen=seen) == {("a", "y"), ("a", "z")}
    assert kept_relations(steps, 3, pairs=False, seen=seen) == {("a", "y"), ("a", "z"), ("a", "b")}
    assert kept_relations(steps, 3, pairs=False) == {("a", "y"), ("a", "b"), ("a", "c")}


def test_turns_without_a_session_and_with_one_tool_skip_the_session_work() -> None:
    """Such turns link nothing and count nothing, so the stores may skip the session work; a
    session or a second tool makes the batch count."""
    alone = [turn("a", 0, "x", session=None), turn("b", 1, "y", session=None)]
    assert not touches_sessions(alone)
    assert plan_sessions(alone, {}, CatalogNames({"x", "y"}), idle_s=0.0).pairs == {}
    assert touches_sessions([*alone, turn("c", 2, "x")])
    assert touches_sessions([*alone, turn("d", 3, "x", "y", session=None)])
