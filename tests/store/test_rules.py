"""The store rules of `toolselect.store.rules` on their own: no store, no I/O."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from toolselect.errors import InvalidInput
from toolselect.records import (
    Exemplar,
    OracleCall,
    Retention,
    Tier,
    Tool,
    Turn,
    pack_vector,
)
from toolselect.store.rules import (
    RETENTION_EXEMPT,
    StoredLabel,
    call_from_row,
    call_row,
    counted,
    evictions,
    exemplar_from_row,
    exemplar_row,
    newest_first,
    plan_saves,
    retention_plan,
    supersedes,
    tool_from_row,
    tool_row,
    turn_from_row,
    turn_row,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TIERS: tuple[Tier, ...] = ("ranker", "teacher", "feedback")


def label(
    query: str,
    tool: str = "t",
    tier: Tier = "ranker",
    *,
    at: datetime = NOW,
    version: int = 0,
    exemplar_id: str | None = None,
) -> Exemplar:
    return Exemplar(
        id=exemplar_id or f"id-{query}",
        query=query,
        tool=tool,
        tier=tier,
        embedder="hashing-v1",
        embedding=(0.5, -0.25),
        created_at=at,
        version=version,
    )


def same(value: Any) -> Any:
    return value


def test_a_usage_label_keeps_its_time_against_a_vote_and_moves_it_for_one() -> None:
    """`counted`: a sighting of the stored tool moves the label's time to it; one of another
    tool takes one from the count and keeps the stored time (the time as sent when the stored
    one was not read), but its own turn; one that outnumbers the label replaces it, its time."""
    then, later = NOW - timedelta(days=3), NOW
    stored = StoredLabel("t", "usage", 2, "id-q", "turn-1", then)
    seen = Exemplar("id-new", "q", "t", "usage", "e", (1.0,), later, turn_id="turn-2")
    assert counted(seen, stored).created_at == later
    against = counted(replace(seen, tool="u"), stored)
    assert (against.tool, against.count, against.created_at) == ("t", 1, then)
    assert (against.id, against.turn_id) == ("id-q", "turn-2")
    unread = counted(replace(seen, tool="u"), StoredLabel("t", "usage", 2))
    assert unread.created_at == later
    flipped = counted(replace(seen, tool="u", count=3), stored)
    assert (flipped.tool, flipped.count, flipped.created_at) == ("u", 1, later)


@pytest.mark.parametrize("stored_tier", TIERS)
@pytest.mark.parametrize("new_tier", TIERS)
def test_supersedes_never_downgrades(stored_tier: Tier, new_tier: Tier) -> None:
    """A label supersedes a stored one of another tool unless its tier is weaker."""
    new = label("q", "b", new_tier)
    expected = TIERS.index(new_tier) >= TIERS.index(stored_tier)
    assert supersedes(new, StoredLabel("a", stored_tier)) is expected
    assert supersedes(new, None)


def test_supersedes_same_tool_and_tier_is_no_change() -> None:
    """The same tool and tier again is no change, while a stronger tier of the same tool is."""
    assert not supersedes(label("q", "a", "teacher"), StoredLabel("a", "teacher"))
    assert supersedes(label("q", "a", "feedback"), StoredLabel("a", "teacher"))


def test_plan_saves_applies_a_batch_in_order() -> None:
    """Items of one query apply in order against each other and the stored label; unknown tools
    are set aside; the written rows are each query's last change."""
    batch = [
        label("Q", "a", "ranker", exemplar_id="1"),
        label("q", "b", "teacher", exemplar_id="2"),
        label("q ", "a", "ranker", exemplar_id="3"),  # weaker than item 2: refused
        label("ghost", "nope", exemplar_id="4"),
        label("kept", "a", "ranker", exemplar_id="5"),  # weaker than stored: refused
    ]
    plan = plan_saves(batch, {"kept": StoredLabel("b", "feedback")}, {"a", "b"})
    assert [e.id for e in plan.changing] == ["1", "2"]
    assert [e.id for e in plan.unknown_tool] == ["4"]
    assert [e.id for e in plan.written] == ["2"]
    assert plan.tools == ("b",)
    result = plan.result(version=7, evicted=1)
    assert [e.version for e in result.changed] == [7, 7] and result.evicted == 1


def test_a_replayed_human_label_never_replaces_a_later_human_one() -> None:
    """`supersedes`: a replayed human label older than the stored human label of another id
    leaves it (a spool replayed after another replica's later word); the same time, the same id
    (a replay again), a naive time read as UTC or a stored time not read do not stop it."""
    later = StoredLabel("a", "feedback", id="later", created_at=NOW)
    older = label("q", "b", "feedback", at=NOW - timedelta(minutes=1), exemplar_id="older")
    assert not supersedes(older, later, replayed=True)
    naive = replace(older, created_at=older.created_at.replace(tzinfo=None))
    assert not supersedes(naive, later, replayed=True)
    assert supersedes(replace(older, created_at=NOW), later, replayed=True)
    assert supersedes(replace(older, id="later"), later, replayed=True)
    assert supersedes(older, replace(later, created_at=None), replayed=True)
    assert supersedes(older, replace(later, tier="teacher"), replayed=True)


def test_a_live_human_label_replaces_a_later_stamped_one() -> None:
    """A human label saved live is the human's latest word whatever its time says: another
    replica's clock running ahead of this one's must not make a correction "older"."""
    ahead = StoredLabel("a", "feedback", id="ahead", created_at=NOW + timedelta(minutes=2))
    live = label("q", "b", "feedback", at=NOW, exemplar_id="live")
    assert supersedes(live, ahead)
    plan = plan_saves([live], {"q": ahead}, {"a", "b"})
    assert [e.id for e in plan.changing] == ["live"] and plan.overtaken == ()


def test_plan_saves_names_the_human_labels_a_later_one_left() -> None:
    """A human label left for a later stored one, or for a later one earlier in the batch, is
    neither changing nor written, and is named in the plan and its result; a downgrade is not."""
    later = StoredLabel("a", "feedback", id="stored", created_at=NOW)
    batch = [
        label("q", "b", "feedback", at=NOW - timedelta(minutes=1), exemplar_id="1"),
        label("p", "a", "feedback", at=NOW, exemplar_id="2"),
        label("P", "b", "feedback", at=NOW - timedelta(minutes=1), exemplar_id="3"),
        label("q", "b", "teacher", exemplar_id="4"),  # a downgrade, not overtaken
    ]
    plan = plan_saves(batch, {"q": later}, {"a", "b"}, replayed=True)
    assert [e.id for e in plan.changing] == ["2"]
    assert [e.id for e in plan.overtaken] == ["1", "3"]
    assert [e.id for e in plan.result(version=3).overtaken] == ["1", "3"]


def test_plan_saves_refuses_an_unknown_tier_first() -> None:
    """A tier outside the known three refuses the batch with a message naming it."""
    bad = Exemplar("x", "q", "a", "oracle", "e", (), NOW)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="got 'oracle'"):
        plan_saves([bad], {}, {"a"})


def test_retention_plan_clamps_caps_and_sorts_tools() -> None:
    """Negative caps keep nothing, the cutoff is max_age_days before now (naive now is UTC),
    and the tools are distinct and sorted; feedback is the exempt tier."""
    plan = retention_plan(
        Retention(per_tool=-1, total=-5, max_age_days=2), NOW.replace(tzinfo=None), "bab"
    )
    assert (plan.per_tool, plan.total, plan.tools) == (0, 0, ("a", "b"))
    assert plan.cutoff == NOW - timedelta(days=2)
    assert plan.exempt == RETENTION_EXEMPT == ("feedback",)


def test_newest_first_breaks_time_ties_by_version_then_id() -> None:
    """Equal creation times order by version, then by id in code point order."""
    exemplars = [
        label("a", version=1, exemplar_id="z"),
        label("b", version=2, exemplar_id="a"),
        label("c", version=2, exemplar_id="\U0001f6e0"),
        label("d", version=2, exemplar_id="\uffff"),
        label("e", at=NOW + timedelta(microseconds=1), exemplar_id="0"),
    ]
    ordered = sorted(exemplars, key=newest_first, reverse=True)
    assert [e.query for e in ordered] == ["e", "c", "d", "b", "a"]


def test_evictions_run_the_three_steps_in_order() -> None:
    """Expired first, then each written tool's surplus, then the overall surplus; feedback
    neither goes nor counts."""
    held = [
        label("old", "t", at=NOW - timedelta(days=40)),
        label("human", "t", "feedback", at=NOW - timedelta(days=400)),
        *(label(f"t{i}", "t", at=NOW - timedelta(hours=i)) for i in range(4)),
        *(label(f"u{i}", "u", at=NOW - timedelta(minutes=i)) for i in range(3)),
    ]
    plan = retention_plan(Retention(per_tool=2, total=4, max_age_days=30), NOW, ["t"])
    assert [e.query for e in evictions(plan, held)] == ["old", "t2", "t3", "t1"]


def test_rows_round_trip_through_the_mapping() -> None:
    """Every record comes back equal from its row, whatever the store's time encoding."""
    tool = Tool("ns__get", "Gets", {"type": "object", "b": [1, 2]}, ("kit",))
    row = tool_row(tool)
    assert row["namespace"] == "ns" and row["input_schema"] == '{"b":[1,2],"type":"object"}'
    assert tool_from_row(row, ["kit"]) == tool
    turn = Turn("t1", "req", "fs_read", NOW, flagged=True, margin=0.5)
    assert turn_from_row(turn_row(turn, datetime.isoformat), datetime.fromisoformat) == turn
    call = OracleCall("c1", "anthropic", "m", "labeled", 3.5, NOW, turn_id="t1")
    assert call_from_row(call_row(call, same), same) == call
    exemplar = label("Hello  World", "t", "teacher")
    stored = exemplar_row(exemplar, same, version=3)
    assert stored["query_norm"] == "hello world" and stored["embedding"] == pack_vector(
        (0.5, -0.25)
    )
    assert exemplar_from_row(stored, same) == label("Hello  World", "t", "teacher", version=3)
    legacy = stored | {"embedding": [0.5, -0.25]}  # older Neo4j stores wrote lists of floats
    assert exemplar_from_row(legacy, same).embedding == (0.5, -0.25)
