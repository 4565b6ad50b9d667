"""The `Store` contract, run unchanged against the SQLite store and a real Neo4j store."""

from __future__ import annotations

import asyncio
import itertools
import math
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tests.store.conftest import StoreFactory
from toolselect.errors import NotFound, StoreError
from toolselect.names import normalise_query
from toolselect.records import (
    TIER_STRENGTH,
    Exemplar,
    ExemplarDelta,
    OracleCall,
    Retention,
    SaveResult,
    StoreState,
    Tier,
    Tool,
    Turn,
)
from toolselect.store.port import Store, lookup_one, save_one
from toolselect.store.rules import StoredLabel, evictions, newest_first, plan_saves, retention_plan
from toolselect.testing import FakeClock

# Recent enough for the default 90-day expiry, whole milliseconds so every backend keeps it exactly.
NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
TIERS: tuple[Tier, ...] = ("ranker", "teacher", "feedback")
# Characters that break naive quoting in SQL, Cypher, JSON or C strings, plus non-ASCII text.
NASTY = 'it\'s "q" `b` {x} $p \\ MATCH (n) DETACH DELETE n; -- \x00 ünï 漢字 🛠️ עברית'


def tool(name: str, description: str = "", **schema: object) -> Tool:
    return Tool(name=name, description=description or f"does {name}", input_schema=schema)


def exemplar(
    query: str,
    tool_name: str,
    tier: Tier = "ranker",
    *,
    at: datetime = NOW,
    embedding: tuple[float, ...] = (0.25, -0.5, 1.0),
    exemplar_id: str | None = None,
    turn_id: str | None = None,
) -> Exemplar:
    return Exemplar(
        id=exemplar_id or f"ex-{uuid.uuid4().hex}",
        query=query,
        tool=tool_name,
        tier=tier,
        embedder="hashing-v1",
        embedding=embedding,
        created_at=at,
        confidence=0.75,
        turn_id=turn_id,
    )


def turn(turn_id: str, **fields: Any) -> Turn:
    base: dict[str, Any] = {"request": f"request {turn_id}", "used_tool": "fs_read", "at": NOW}
    return Turn(id=turn_id, **(base | fields))


def call(call_id: str, at: datetime, turn_id: str | None = None) -> OracleCall:
    return OracleCall(
        id=call_id,
        provider="anthropic",
        model="claude-haiku",
        result="labeled",
        latency_ms=812.5,
        at=at,
        turn_id=turn_id,
        input_tokens=420,
        output_tokens=7,
        cost_usd=0.00123,
        error=None,
    )


def same_exemplar(got: Exemplar | None, want: Exemplar) -> None:
    """Every field equal, the embedding within float32 precision, the version assigned."""
    assert got is not None
    assert (got.id, got.query, got.tool, got.tier, got.embedder, got.turn_id) == (
        want.id,
        want.query,
        want.tool,
        want.tier,
        want.embedder,
        want.turn_id,
    )
    assert got.created_at == want.created_at
    assert got.created_at.utcoffset() == timedelta(0)
    assert got.confidence == pytest.approx(want.confidence)
    assert len(got.embedding) == len(want.embedding)
    assert all(abs(a - b) <= 1e-6 for a, b in zip(got.embedding, want.embedding, strict=True))
    assert got.version > 0


async def seed_tools(store: Store, *names: str) -> None:
    await store.upsert_tools([tool(n) for n in names])


# --- lifecycle ------------------------------------------------------------------------------


async def test_fresh_store_state_is_zero(store_factory: StoreFactory) -> None:
    """A freshly migrated store reports catalog and exemplar versions of zero and an honest uri."""
    store = await store_factory.make()
    assert await store.state() == StoreState(catalog_version=0, exemplar_version=0)
    assert store.uri == store_factory.expected_uri


async def test_migrate_is_idempotent_and_keeps_data(store: Store) -> None:
    """Running migrate again on a used store keeps its tools and versions."""
    await seed_tools(store, "alpha")
    before = await store.state()
    await store.migrate()
    await store.migrate()
    assert await store.state() == before
    assert [t.name for t in await store.list_tools()] == ["alpha"]


async def test_ping_answers(store: Store) -> None:
    """ping returns quietly while the backend is reachable."""
    await store.ping()


@pytest.mark.reopens
async def test_reopen_after_close_keeps_data(store_factory: StoreFactory) -> None:
    """A new store on the same data sees tools, packs, turns, exemplars, calls and versions."""
    store = await store_factory.make()
    await store.upsert_tools([tool("alpha", "first", type="object")], pack="kit")
    await store.record_turns([turn("t-1", flagged=True, label="alpha")])
    saved = exemplar("open the first thing", "alpha", "teacher", turn_id="t-1")
    await save_one(store, saved)
    await store.record_oracle_call(call("c-1", NOW, turn_id="t-1"))
    state = await store.state()

    again = await store_factory.reopen(store)
    assert await again.state() == state
    assert await again.get_tool("alpha") == Tool("alpha", "first", {"type": "object"}, ("kit",))
    assert await again.get_turn("t-1") == turn("t-1", flagged=True, label="alpha")
    same_exemplar(await lookup_one(again, "Open the first thing"), saved)
    assert await again.oracle_calls("t-1") == [call("c-1", NOW, turn_id="t-1")]


# --- tools ----------------------------------------------------------------------------------


async def test_upsert_counts_new_and_unchanged_by_content_hash(store: Store) -> None:
    """New tools count as upserted, identical ones as unchanged, edited ones as upserted again."""
    first = await store.upsert_tools([tool("a"), tool("b"), tool("c")])
    assert (first.upserted, first.unchanged, first.moved) == (3, 0, True)
    assert (await store.state()).catalog_version == 1

    same = await store.upsert_tools([tool("a"), tool("b"), tool("c")])
    assert (same.upserted, same.unchanged, same.moved) == (0, 3, False)
    assert (await store.state()).catalog_version == 1

    edited = await store.upsert_tools([tool("a", "new text"), tool("b"), tool("c", q="x")])
    assert (edited.upserted, edited.unchanged, edited.moved) == (2, 1, True)
    assert (await store.state()).catalog_version == 2

    packed = await store.upsert_tools([tool("b")], pack="kit")  # membership alone moves it
    assert (packed.upserted, packed.unchanged, packed.moved) == (0, 1, True)
    assert (await store.state()).catalog_version == 3
    assert (await store.get_tool("a")) == Tool("a", "new text", {})
    assert (await store.get_tool("c")) == Tool("c", "does c", {"q": "x"})


async def test_tool_fields_round_trip(store: Store) -> None:
    """A tool's description and nested input schema come back equal; key order is not content."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "n": {"minimum": 1}}}
    reordered = {"properties": {"n": {"minimum": 1}, "city": {"type": "string"}}, "type": "object"}
    await store.upsert_tools([Tool("weather__get", "Weather now.", schema)])
    got = await store.get_tool("weather__get")
    assert got == Tool("weather__get", "Weather now.", schema, ())
    again = await store.upsert_tools([Tool("weather__get", "Weather now.", reordered)])
    assert (again.upserted, again.unchanged) == (0, 1)


async def test_get_tool_unknown_is_none(store: Store) -> None:
    """Looking up a name never stored gives None, and names are exact (no bare-name match)."""
    await seed_tools(store, "github__search")
    assert await store.get_tool("missing") is None
    assert await store.get_tool("search") is None


async def test_list_tools_sorted_by_name(store: Store) -> None:
    """list_tools returns every tool sorted by name whatever the insertion order."""
    await seed_tools(store, "zeta", "alpha", "mid__beta", "Alpha2")
    assert [t.name for t in await store.list_tools()] == ["Alpha2", "alpha", "mid__beta", "zeta"]


async def test_packs_membership_and_filter(store: Store) -> None:
    """Tools join packs on upsert; list_tools(pack) filters; each tool lists all its packs."""
    await store.upsert_tools([tool("a"), tool("b")], pack="p1")
    await store.upsert_tools([tool("b"), tool("c")], pack="p2")
    assert [t.name for t in await store.list_tools("p1")] == ["a", "b"]
    assert [t.name for t in await store.list_tools("p2")] == ["b", "c"]
    assert await store.list_tools("nope") == []
    listed = {t.name: t.packs for t in await store.list_tools()}
    assert listed == {"a": ("p1",), "b": ("p1", "p2"), "c": ("p2",)}
    assert (await store.get_tool("b")) == Tool("b", "does b", {}, ("p1", "p2"))
    assert [t.packs for t in await store.list_tools("p2")] == [("p1", "p2"), ("p2",)]


async def test_pack_change_alone_is_unchanged_content_but_bumps(store: Store) -> None:
    """Adding known tools to a new pack counts them unchanged yet moves catalog_version once."""
    await store.upsert_tools([tool("a"), tool("b")])
    before = (await store.state()).catalog_version
    result = await store.upsert_tools([tool("a"), tool("b")], pack="kit")
    assert (result.upserted, result.unchanged) == (0, 2)
    assert (await store.state()).catalog_version == before + 1
    assert [t.name for t in await store.list_tools("kit")] == ["a", "b"]
    again = await store.upsert_tools([tool("a")], pack="kit")
    assert (again.upserted, again.unchanged) == (0, 1)
    assert (await store.state()).catalog_version == before + 1


async def test_delete_tool_cascades(store: Store) -> None:
    """Deleting a tool removes it, its pack membership and its exemplars (reported as deleted)."""
    await store.upsert_tools([tool("gone"), tool("kept")], pack="kit")
    await save_one(store, exemplar("q one", "gone"))
    await save_one(store, exemplar("q two", "gone", "feedback"))
    await save_one(store, exemplar("q three", "kept"))
    before = await store.state()

    assert await store.delete_tool("gone") is True
    after = await store.state()
    assert after.catalog_version > before.catalog_version
    assert after.exemplar_version > before.exemplar_version
    assert await store.get_tool("gone") is None
    assert [t.name for t in await store.list_tools("kit")] == ["kept"]
    assert await store.exemplars_for_tool("gone") == []
    assert await lookup_one(store, "q one") is None
    assert await lookup_one(store, "q three") is not None
    delta = await store.exemplars_since(before.exemplar_version)
    assert set(delta.deleted) == {"q one", "q two"}
    assert delta.upserted == ()

    assert await store.delete_tool("gone") is False
    assert await store.state() == after


async def test_delete_tool_without_exemplars_keeps_exemplar_version(store: Store) -> None:
    """Deleting a tool that has no exemplars moves only the catalog version."""
    await seed_tools(store, "lonely")
    before = await store.state()
    assert await store.delete_tool("lonely") is True
    after = await store.state()
    assert after.catalog_version > before.catalog_version
    assert after.exemplar_version == before.exemplar_version


# --- turns ----------------------------------------------------------------------------------


async def test_turn_round_trips_every_field(store: Store) -> None:
    """A turn comes back equal, with its time as an aware UTC datetime of the same instant."""
    local = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=timezone(timedelta(hours=2)))
    full = turn(
        "t-full",
        at=local,
        agent_id="agent-7",
        pack="kit",
        outcome="error",
        top1="weather__get",
        margin=0.125,
        flagged=True,
        flag_reason="fallback",
        tier="teacher",
        label="weather__get",
        result="labeled",
    )
    assert await store.record_turns([full, turn("t-bare")]) == 2
    got = await store.get_turn("t-full")
    assert got == full
    assert got is not None and got.at.utcoffset() == timedelta(0)
    assert await store.get_turn("t-bare") == turn("t-bare")
    assert await store.get_turn("t-none") is None


async def test_turn_keeps_its_search_session_and_used_tools(store: Store) -> None:
    """Where the used tool stood in the search the turn reports, its session, and every tool
    of a turn that used several, in order (hostile names included)."""
    linked = turn(
        "t-linked",
        used_tool="cd",
        used_tools=("cd", "cp", NASTY),
        session_id="s-1",
        search_id="0a1b2c",
        search_status="shown",
        shown_position=3,
        shown_k=5,
        outcome="ok",
        tier="usage",
        label="cd",
        result="labeled",
    )
    assert await store.record_turns([linked]) == 1
    assert await store.get_turn("t-linked") == linked


async def test_a_usage_label_seen_again_is_counted_on_one_exemplar(store: Store) -> None:
    """The same query used with the same tool again: one exemplar whose count grows (and whose
    time moves to the latest sighting); a sighting of another tool takes one from it, down to 0,
    and one against 0 takes its place (a running majority: with three tools competing, the one
    seen most stays); teacher and human labels are never replaced by usage, and replace it."""
    await seed_tools(store, "t", "u", "v")
    first = exemplar("Book a Room", "t", "usage")
    assert [e.count for e in (await store.save_exemplars([first])).changed] == [1]
    later = NOW + timedelta(minutes=5)
    again = replace(exemplar("book a  room", "t", "usage"), created_at=later)
    before = await store.state()
    result = await store.save_exemplars([again, replace(again, id=f"ex-{uuid.uuid4().hex}")])
    assert [e.count for e in result.changed] == [2, 3]
    stored = await lookup_one(store, "BOOK A ROOM")
    assert stored is not None
    assert (stored.id, stored.tool, stored.count, stored.created_at) == (first.id, "t", 3, later)
    assert len(await store.exemplars_for_tool("t")) == 1
    assert (await store.state()).exemplar_version == before.exemplar_version + 1
    against = await store.save_exemplars([exemplar("book a room", "u", "usage")])
    assert [(e.id, e.tool, e.count) for e in against.changed] == [(first.id, "t", 2)]
    rivals = [exemplar("book a room", "v", "usage"), exemplar("book a room", "u", "usage")]
    held = await store.save_exemplars(rivals)  # t: 2 sightings ahead of u and v together
    assert [(e.id, e.tool, e.count) for e in held.changed] == [
        (first.id, "t", 1),
        (first.id, "t", 0),
    ]
    others = [exemplar("book a room", "u", "usage") for _ in range(2)]
    flipped = await store.save_exemplars(others)
    assert [(e.tool, e.count) for e in flipped.changed] == [("u", 1), ("u", 2)]
    stored = await lookup_one(store, "book a room")
    assert stored is not None and (stored.id, stored.tool, stored.count) == (others[0].id, "u", 2)
    assert await store.exemplars_for_tool("t") == []
    teacher = exemplar("book a room", "t", "teacher")
    assert (await store.save_exemplars([teacher])).changed != ()
    assert (await store.save_exemplars([exemplar("book a room", "u", "usage")])).changed == ()
    stored = await lookup_one(store, "book a room")
    assert stored is not None and (stored.tier, stored.count) == ("teacher", 1)


async def test_a_sighting_against_a_usage_label_keeps_its_time(
    store_factory: StoreFactory,
) -> None:
    """A sighting of another tool takes one from a usage label and leaves its `created_at`, the
    time of the latest sighting that confirmed it, as it was (also after a confirming sighting
    in the same batch): a label losing votes does not look new, so retention by age expires it
    when its last confirmation is old, not a month after the last vote against it."""
    clock = FakeClock(NOW)
    store = await store_factory.make(retention=Retention(max_age_days=30), clock=clock)
    await seed_tools(store, "t", "u", "w")
    confirmed = NOW - timedelta(days=20)
    await store.save_exemplars([exemplar("book a room", "t", "usage", at=confirmed)] * 2)
    against = await store.save_exemplars([exemplar("book a room", "u", "usage", at=NOW)])
    assert [(e.tool, e.count, e.created_at) for e in against.changed] == [("t", 1, confirmed)]
    stored = await lookup_one(store, "book a room")
    assert stored is not None and (stored.count, stored.created_at) == (1, confirmed)
    again = NOW - timedelta(days=10)
    batch = [
        exemplar("book a room", "t", "usage", at=again),
        exemplar("book a room", "u", "usage", at=NOW),
    ]
    result = await store.save_exemplars(batch)
    assert [(e.count, e.created_at) for e in result.changed] == [(2, again), (1, again)]
    stored = await lookup_one(store, "book a room")
    assert stored is not None and (stored.count, stored.created_at) == (1, again)
    clock.advance(days=25)  # the last confirmation is 35 days old, the last vote against 25
    await store.save_exemplars([exemplar("another request", "w", "usage", at=clock())])
    assert await lookup_one(store, "book a room") is None


async def test_the_same_turn_again_is_one_sighting(store: Store) -> None:
    """A usage label from a turn already counted (the turn sent again, a spool replayed twice)
    changes nothing, in a later call or in the same one; another turn's sighting counts."""
    await seed_tools(store, "t")
    seen = exemplar("book a room", "t", "usage", turn_id="turn-1")
    assert [e.count for e in (await store.save_exemplars([seen])).changed] == [1]
    resent = replace(seen, id=f"ex-{uuid.uuid4().hex}")
    before = await store.state()
    assert (await store.save_exemplars([resent, resent])).changed == ()
    assert await store.state() == before
    other = exemplar("Book a room", "t", "usage", turn_id="turn-2")
    assert [e.count for e in (await store.save_exemplars([other, other])).changed] == [2]
    stored = await lookup_one(store, "book a room")
    assert stored is not None and (stored.count, stored.turn_id) == (2, "turn-2")


async def test_turn_resend_is_stored_once_and_updated(store: Store) -> None:
    """Resending a turn id counts it once and updates the stored fields."""
    assert await store.record_turns([turn("t-1"), turn("t-2")]) == 2
    updated = turn("t-1", flagged=True, flag_reason="fallback", tier="ranker", label="x")
    assert await store.record_turns([updated, turn("t-3")]) == 1
    assert await store.get_turn("t-1") == updated
    assert await store.record_turns([updated]) == 0
    assert await store.record_turns([]) == 0


async def test_turn_repeated_inside_one_batch_counts_once(store: Store) -> None:
    """The same new id twice in one batch is one new turn, holding the last version sent."""
    last = turn("t-dup", outcome="ok")
    assert await store.record_turns([turn("t-dup"), last]) == 1
    assert await store.get_turn("t-dup") == last


async def test_recorded_turn_ids_are_the_stored_ones(store: Store) -> None:
    """Of the ids asked, the stored turns' (each once); none for none asked."""
    await store.record_turns([turn("t-1"), turn("t-2")])
    assert await store.recorded_turn_ids(["t-2", "t-9", "t-2", "t-1"]) == {"t-1", "t-2"}
    assert await store.recorded_turn_ids([]) == set()


async def test_undecided_turns_are_the_teacher_tier_unfinished_before_a_time(
    store: Store,
) -> None:
    """Teacher-tier turns with no result observed before the time, oldest first (then by id),
    at most `limit`; a finished one, another tier's, or a later one is not among them."""
    hour = timedelta(hours=1)
    await store.record_turns(
        [
            turn("t-late", tier="teacher", at=NOW - hour),
            turn("t-b", tier="teacher", at=NOW - 3 * hour),
            turn("t-a", tier="teacher", at=NOW - 3 * hour),
            turn("t-first", tier="teacher", at=NOW - 5 * hour),
            turn("t-done", tier="teacher", result="labeled", label="fs_read", at=NOW - 5 * hour),
            turn("t-ranker", tier="ranker", at=NOW - 5 * hour),
            turn("t-plain", at=NOW - 5 * hour),
        ]
    )
    before = NOW - 2 * hour
    assert [t.id for t in await store.undecided_turns(before, 10)] == ["t-first", "t-a", "t-b"]
    assert [t.id for t in await store.undecided_turns(before, 2)] == ["t-first", "t-a"]
    assert await store.undecided_turns(before, 0) == []
    first = await store.undecided_turns(NOW - 4 * hour, 10)
    assert first == [turn("t-first", tier="teacher", at=NOW - 5 * hour)]
    await store.record_turns([replace(first[0], result="error")])
    assert [t.id for t in await store.undecided_turns(before, 10)] == ["t-a", "t-b"]


async def test_refused_turns_are_the_budget_refused_still_undecided_newest_first(
    store: Store,
) -> None:
    """Teacher turns a spent budget refused (`limit_reached`, the reason ending in
    `BUDGET_SPENT`) observed before the time, newest first (then by id), at most `limit`; not a
    turn a teacher backlog refused, one decided since, one with a teacher call traced (asked
    about again, its new result not recorded), another tier's, or a later one."""
    minute = timedelta(minutes=1)

    def refused(turn_id: str, minutes: int, reason: str = "hourly budget of 2 calls spent") -> Turn:
        return turn(turn_id, tier="teacher", result="limit_reached", reason=reason,
                    flagged=True, at=NOW - minutes * minute)  # fmt: skip

    await store.record_turns(
        [
            refused("r-old", 30),
            refused("r-b", 20, "global hourly budget of 9 calls spent"),
            refused("r-a", 20),
            refused("r-new", 10),
            refused("r-late", 1),
            refused("backlog", 15, "1024 turns wait for the teacher"),
            refused("traced", 15),
            replace(refused("decided", 15), result="labeled", label="fs_read", reason=None),
            replace(refused("ratchet", 15), tier="ratchet"),
        ]
    )
    await store.record_oracle_call(call("c-traced", NOW - 5 * minute, turn_id="traced"))
    before = NOW - 5 * minute
    found = await store.refused_turns(before, 10)
    assert [t.id for t in found] == ["r-new", "r-b", "r-a", "r-old"]
    assert found[0] == refused("r-new", 10)
    assert [t.id for t in await store.refused_turns(before, 2)] == ["r-new", "r-b"]
    assert await store.refused_turns(before, 0) == []
    await store.record_turns([replace(found[0], result="labeled", label="fs_read")])
    assert [t.id for t in await store.refused_turns(before, 10)] == ["r-b", "r-a", "r-old"]


async def test_ten_thousand_turns_in_one_batch(store: Store) -> None:
    """A 10,000-turn batch is stored in one call, and resending it adds nothing."""
    batch = [turn(f"bulk-{i}", margin=i / 10_000) for i in range(10_000)]
    assert await store.record_turns(batch) == 10_000
    assert await store.get_turn("bulk-9999") == batch[-1]
    assert await store.get_turn("bulk-0") == batch[0]
    assert await store.record_turns(batch[:5000]) == 0


# --- exemplars ------------------------------------------------------------------------------


async def test_save_exemplar_for_unknown_tool_raises_not_found(store: Store) -> None:
    """Saving a label for a tool not in the catalog raises NotFound and writes nothing."""
    await seed_tools(store, "known")
    with pytest.raises(NotFound, match="unknown tool 'ghost'"):
        await save_one(store, exemplar("query", "ghost"))
    assert await lookup_one(store, "query") is None
    assert (await store.state()).exemplar_version == 0


async def test_exemplar_round_trips_and_gets_version(store: Store) -> None:
    """A saved exemplar comes back with every field, found by any spelling of its query."""
    await seed_tools(store, "weather__get")
    saved = exemplar("Weather in Turin", "weather__get", "teacher", turn_id="t-9")
    assert await save_one(store, saved) is True
    got = await lookup_one(store, "  WEATHER\tin   turin ")
    same_exemplar(got, saved)
    assert got is not None and got.version == (await store.state()).exemplar_version
    assert got.query_norm == "weather in turin"
    assert await lookup_one(store, "weather in milan") is None


async def test_embedding_round_trips_as_float32(store: Store) -> None:
    """A 384-dimension embedding comes back with the same length and values within 1e-6."""
    await seed_tools(store, "t")
    vector = tuple(math.sin(i * 0.37) / 3 for i in range(384))
    await save_one(store, exemplar("vector query", "t", embedding=vector))
    got = await lookup_one(store, "vector query")
    assert got is not None and len(got.embedding) == 384
    assert max(abs(a - b) for a, b in zip(got.embedding, vector, strict=True)) <= 1e-6
    assert all(isinstance(v, float) for v in got.embedding)


async def test_one_exemplar_per_normalised_query(store: Store) -> None:
    """Two spellings of one query share one exemplar; a later label of equal tier replaces it."""
    await seed_tools(store, "weather__get", "maps__route")
    first = exemplar("Weather  in TURIN", "maps__route", "teacher")
    second = exemplar("weather in turin", "weather__get", "teacher")
    assert await save_one(store, first) is True
    assert await save_one(store, second) is True
    same_exemplar(await lookup_one(store, "Weather  in TURIN"), second)
    assert await store.exemplars_for_tool("maps__route") == []
    assert [e.id for e in await store.exemplars_for_tool("weather__get")] == [second.id]
    delta = await store.exemplars_since(0)
    assert [e.id for e in delta.upserted] == [second.id]


async def test_never_downgrade_a_stronger_tier(store: Store) -> None:
    """For every tier pair, a weaker label never replaces a stronger one and a stronger one does."""
    await seed_tools(store, "old", "new")
    for stored_tier, new_tier in itertools.product(TIERS, TIERS):
        query = f"pair {stored_tier} then {new_tier}"
        original = exemplar(query, "old", stored_tier)
        await save_one(store, original)
        before = await store.state()
        changed = await save_one(store, exemplar(query, "new", new_tier))
        kept = await lookup_one(store, query)
        assert kept is not None
        if TIER_STRENGTH[new_tier] < TIER_STRENGTH[stored_tier]:
            assert changed is False, (stored_tier, new_tier)
            assert (kept.id, kept.tool, kept.tier) == (original.id, "old", stored_tier)
            assert await store.state() == before
        else:
            assert changed is True, (stored_tier, new_tier)
            assert (kept.tool, kept.tier) == ("new", new_tier)
            assert (await store.state()).exemplar_version > before.exemplar_version


async def test_same_tool_and_tier_again_is_no_change(store: Store) -> None:
    """Relabelling a query with its stored tool and tier changes nothing, not even the id."""
    await seed_tools(store, "t")
    original = exemplar("Same Query", "t", "teacher")
    assert await save_one(store, original) is True
    before = await store.state()
    assert await save_one(store, exemplar("same query", "t", "teacher")) is False
    assert await store.state() == before
    same_exemplar(await lookup_one(store, "same query"), original)
    assert (await store.exemplars_since(before.exemplar_version)).upserted == ()


async def test_stronger_tier_same_tool_replaces_all_fields(store: Store) -> None:
    """An upgrade replaces every field including the id; the old id is gone."""
    await seed_tools(store, "t")
    weak = exemplar("upgrade me", "t", "ranker", embedding=(1.0, 0.0))
    strong = exemplar("Upgrade Me", "t", "feedback", embedding=(0.0, 1.0), turn_id="t-5")
    await save_one(store, weak)
    assert await save_one(store, strong) is True
    same_exemplar(await lookup_one(store, "upgrade me"), strong)
    assert await store.delete_exemplar(weak.id) is False
    assert [e.id for e in await store.exemplars_for_tool("t")] == [strong.id]


async def test_exemplars_for_tool_newest_first(store: Store) -> None:
    """A tool's exemplars come newest first by creation time, not by save order."""
    await seed_tools(store, "t", "other")
    for offset in (3, 1, 2):
        await save_one(store, exemplar(f"q{offset}", "t", at=NOW - timedelta(hours=offset)))
    await save_one(store, exemplar("elsewhere", "other"))
    assert [e.query for e in await store.exemplars_for_tool("t")] == ["q1", "q2", "q3"]
    assert await store.exemplars_for_tool("none") == []


async def test_delete_exemplar(store: Store) -> None:
    """Deleting an exemplar by id removes it, tombstones its query and moves the version."""
    await seed_tools(store, "t")
    saved = exemplar("Bad Label", "t")
    await save_one(store, saved)
    before = await store.state()
    assert await store.delete_exemplar("no-such-id") is False
    assert await store.state() == before
    assert await store.delete_exemplar(saved.id) is True
    assert await lookup_one(store, "bad label") is None
    delta = await store.exemplars_since(before.exemplar_version)
    assert delta.deleted == ("bad label",)
    assert delta.version == before.exemplar_version + 1 == (await store.state()).exemplar_version
    assert await store.delete_exemplar(saved.id) is False


async def test_exemplars_since_reports_writes_and_deletions(store: Store) -> None:
    """exemplars_since gives writes after a version in version order, deletions, and the version."""
    await seed_tools(store, "t", "u")
    # Created in the reverse of save order: the delta follows versions, not creation times.
    a = exemplar("a", "t", at=NOW)
    b = exemplar("b", "u", at=NOW - timedelta(hours=1))
    c = exemplar("c", "t", at=NOW - timedelta(hours=2))
    for e in (a, b, c):
        await save_one(store, e)
    everything = await store.exemplars_since(0)
    assert [e.id for e in everything.upserted] == [a.id, b.id, c.id]
    versions = [e.version for e in everything.upserted]
    assert versions == sorted(set(versions))
    assert everything.deleted == ()
    assert everything.version == versions[-1] == (await store.state()).exemplar_version

    after_a = versions[0]
    await store.delete_exemplar(b.id)
    delta = await store.exemplars_since(after_a)
    assert [e.id for e in delta.upserted] == [c.id]
    assert delta.deleted == ("b",)
    current = await store.exemplars_since(delta.version)
    assert current == ExemplarDelta(version=delta.version, upserted=(), deleted=())


async def test_replica_applying_deltas_converges(store_factory: StoreFactory) -> None:
    """A replica applying polled deltas (deleted, then upserted) ends with the store's labels."""
    store = await store_factory.make(Retention(per_tool=3, total=5))
    await seed_tools(store, "t", "u", "v")
    replica: dict[str, tuple[str, str]] = {}
    seen = 0

    async def poll() -> None:
        nonlocal seen
        delta = await store.exemplars_since(seen)
        for query_norm in delta.deleted:
            replica.pop(query_norm, None)
        for e in delta.upserted:
            replica[e.query_norm] = (e.tool, e.tier)
        seen = delta.version

    saved: list[Exemplar] = []
    for i in range(12):
        tier = TIERS[i % 3]
        e = exemplar(f"query {i % 7}", "tuv"[i % 3], tier, at=NOW + timedelta(minutes=i))
        await save_one(store, e)
        saved.append(e)
        if i % 4 == 1:
            await store.delete_exemplar(saved[i - 1].id)
        if i % 3 == 0:
            await poll()
    await store.delete_tool("v")
    await poll()

    truth = {
        e.query_norm: (e.tool, e.tier)
        for name in "tuv"
        for e in await store.exemplars_for_tool(name)
    }
    assert replica == truth
    assert seen == (await store.state()).exemplar_version


# --- versions -------------------------------------------------------------------------------


async def test_versions_are_monotonic_across_all_writes(store: Store) -> None:
    """Each changing write raises its counter, no-op writes leave both alone, none go back."""
    history = [await store.state()]

    async def step(write: Callable[[], Awaitable[object]], catalog: bool, exemplars: bool) -> None:
        await write()
        now = await store.state()
        last = history[-1]
        assert (now.catalog_version > last.catalog_version) is catalog, write
        assert (now.exemplar_version > last.exemplar_version) is exemplars, write
        assert now.catalog_version >= last.catalog_version
        assert now.exemplar_version >= last.exemplar_version
        history.append(now)

    first = exemplar("q", "a")
    await step(lambda: store.upsert_tools([tool("a"), tool("b")]), True, False)
    await step(lambda: store.upsert_tools([tool("a"), tool("b")]), False, False)
    await step(lambda: store.upsert_tools([tool("a")], pack="p"), True, False)
    await step(lambda: store.upsert_tools([tool("b", "edited")]), True, False)
    await step(lambda: store.record_turns([turn("t")]), False, False)
    await step(lambda: save_one(store, first), False, True)
    await step(lambda: save_one(store, exemplar("Q", "a")), False, False)
    await step(lambda: save_one(store, exemplar("q", "b", "teacher")), False, True)
    await step(lambda: save_one(store, exemplar("q", "a", "ranker")), False, False)
    await step(lambda: store.record_oracle_call(call("c", NOW)), False, False)
    await step(lambda: store.delete_exemplar(first.id), False, False)
    await step(lambda: save_one(store, exemplar("r", "b")), False, True)
    await step(lambda: store.delete_tool("b"), True, True)
    await step(lambda: store.delete_tool("b"), False, False)


# --- retention ------------------------------------------------------------------------------


async def test_retention_per_tool_cap_evicts_oldest(store_factory: StoreFactory) -> None:
    """Beyond per_tool, a tool's oldest exemplars (by creation time) go; other tools keep theirs."""
    store = await store_factory.make(Retention(per_tool=3, total=100))
    await seed_tools(store, "t", "other")
    await save_one(store, exemplar("other 1", "other", at=NOW - timedelta(days=9)))
    start = (await store.state()).exemplar_version
    for day in (5, 1, 4, 2, 3):  # save order differs from age order
        await save_one(store, exemplar(f"day {day}", "t", at=NOW - timedelta(days=10 - day)))
    assert [e.query for e in await store.exemplars_for_tool("t")] == ["day 5", "day 4", "day 3"]
    assert [e.query for e in await store.exemplars_for_tool("other")] == ["other 1"]
    assert set((await store.exemplars_since(start)).deleted) == {"day 1", "day 2"}


async def test_retention_total_cap_evicts_oldest_overall(store_factory: StoreFactory) -> None:
    """Beyond total, the oldest exemplars of any tool go first."""
    store = await store_factory.make(Retention(per_tool=100, total=4))
    await seed_tools(store, "t", "u", "v")
    for i in range(6):
        await save_one(store, exemplar(f"q{i}", "tuv"[i % 3], at=NOW + timedelta(seconds=i)))
    kept = {e.query for name in "tuv" for e in await store.exemplars_for_tool(name)}
    assert kept == {"q2", "q3", "q4", "q5"}
    assert set((await store.exemplars_since(0)).deleted) == {"q0", "q1"}


async def test_retention_expiry_follows_the_injected_clock(store_factory: StoreFactory) -> None:
    """Past max_age_days on the store's clock, non-feedback exemplars go on the next save."""
    clock = FakeClock(NOW)
    store = await store_factory.make(Retention(max_age_days=10), clock=clock)
    await seed_tools(store, "t")
    await save_one(store, exemplar("aging ranker", "t", "ranker", at=NOW))
    await save_one(store, exemplar("aging teacher", "t", "teacher", at=NOW))
    await save_one(store, exemplar("aging feedback", "t", "feedback", at=NOW))
    clock.set(NOW + timedelta(days=9))
    await save_one(store, exemplar("nine days on", "t", at=clock()))
    assert len(await store.exemplars_for_tool("t")) == 4

    clock.set(NOW + timedelta(days=11))
    await save_one(store, exemplar("eleven days on", "t", at=clock()))
    kept = [e.query for e in await store.exemplars_for_tool("t")]
    assert kept == ["eleven days on", "nine days on", "aging feedback"]


async def test_feedback_is_exempt_from_retention(store_factory: StoreFactory) -> None:
    """Feedback exemplars are never evicted and do not count against the caps."""
    clock = FakeClock(NOW)
    retention = Retention(per_tool=2, total=3, max_age_days=1)
    store = await store_factory.make(retention, clock=clock)
    await seed_tools(store, "t")
    for i in range(4):
        await save_one(store, exemplar(f"human {i}", "t", "feedback", at=NOW - timedelta(days=30)))
    for i in range(3):
        await save_one(store, exemplar(f"machine {i}", "t", at=NOW + timedelta(seconds=i)))
    kept = {e.query for e in await store.exemplars_for_tool("t")}
    assert kept == {"human 0", "human 1", "human 2", "human 3", "machine 1", "machine 2"}


# --- oracle calls ---------------------------------------------------------------------------


async def test_oracle_calls_oldest_first_and_by_turn(store: Store) -> None:
    """Oracle calls come back oldest first, all of them or only one turn's, or those at or
    after a time."""
    await store.record_turns([turn("t-1"), turn("t-2")])
    late = call("c-late", NOW + timedelta(seconds=30), turn_id="t-1")
    early = call("c-early", NOW, turn_id="t-1")
    other = call("c-other", NOW + timedelta(seconds=10), turn_id="t-2")
    failed = OracleCall(
        id="c-fail", provider="openai", model="m", result="error", latency_ms=20000.0,
        at=NOW + timedelta(seconds=20), error="timeout after 20 s",
    )  # fmt: skip
    for c in (late, early, other, failed):
        await store.record_oracle_call(c)
    assert await store.oracle_calls() == [early, other, failed, late]
    assert await store.oracle_calls("t-1") == [early, late]
    assert await store.oracle_calls("t-2") == [other]
    assert await store.oracle_calls("t-none") == []
    since = NOW + timedelta(seconds=20)  # at or after; a naive time is UTC
    assert await store.oracle_calls(since=since) == [failed, late]
    assert await store.oracle_calls(since=since.replace(tzinfo=None)) == [failed, late]
    assert await store.oracle_calls("t-1", since=since) == [late]


# --- hostile text ---------------------------------------------------------------------------


async def test_hostile_text_is_stored_verbatim(store: Store) -> None:
    """Quotes, backticks, braces, $, Cypher keywords, NUL and non-ASCII survive every field."""
    name = "ns`}$__" + NASTY
    hostile = Tool(name, NASTY, {"description": NASTY, NASTY: [NASTY]})
    await store.upsert_tools([hostile], pack=NASTY)
    await store.upsert_tools([tool("plain")], pack="plain pack")
    assert await store.get_tool(name) == Tool(name, NASTY, hostile.input_schema, (NASTY,))
    assert [t.name for t in await store.list_tools(NASTY)] == [name]
    assert {t.name for t in await store.list_tools()} == {name, "plain"}

    turn_id = "turn " + NASTY
    rich = turn(turn_id, request=NASTY, used_tool=name, agent_id=NASTY, flag_reason=NASTY)
    assert await store.record_turns([rich]) == 1
    assert await store.get_turn(turn_id) == rich

    query = "Query " + NASTY
    saved = exemplar(query, name, exemplar_id="ex " + NASTY, turn_id=turn_id)
    assert await save_one(store, saved) is True
    same_exemplar(await lookup_one(store, query), saved)
    assert [e.id for e in await store.exemplars_for_tool(name)] == [saved.id]
    assert await store.delete_exemplar(saved.id) is True
    assert (await store.exemplars_since(0)).deleted == (normalise_query(query),)

    traced = OracleCall(
        "call " + NASTY, NASTY, NASTY, "error", 1.5, NOW, turn_id=turn_id, error=NASTY
    )
    await store.record_oracle_call(traced)
    assert await store.oracle_calls(turn_id) == [traced]
    assert await store.delete_tool(name) is True
    assert await store.get_tool(name) is None


# --- concurrency ----------------------------------------------------------------------------


async def test_concurrent_writers_all_land_with_unique_versions(store: Store) -> None:
    """Twenty coroutines saving exemplars and turns at once all land, with unique versions."""
    await seed_tools(store, "t", "u")

    async def writer(i: int) -> None:
        await save_one(store, exemplar(f"concurrent {i}", "tu"[i % 2]))
        await store.record_turns([turn(f"ct-{i}"), turn("shared")])

    await asyncio.gather(*(writer(i) for i in range(20)))
    delta = await store.exemplars_since(0)
    assert {e.query for e in delta.upserted} == {f"concurrent {i}" for i in range(20)}
    versions = [e.version for e in delta.upserted]
    assert versions == sorted(versions) and len(set(versions)) == 20
    assert delta.version == versions[-1] == (await store.state()).exemplar_version == 20
    for i in range(20):
        assert await store.get_turn(f"ct-{i}") is not None
    assert await store.record_turns([turn("shared")]) == 0


async def test_concurrent_labels_of_one_query_keep_the_strongest(store: Store) -> None:
    """Racing labels of one query never end on a weaker tier than the strongest sent."""
    await seed_tools(store, "a", "b", "c")
    labels = [exemplar("Contested", "abc"[i % 3], TIERS[i % 3]) for i in range(18)]
    labels += [exemplar("contested", "a", "feedback")]
    results = await asyncio.gather(*(save_one(store, e) for e in labels))
    final = await lookup_one(store, "contested")
    assert final is not None and final.tier == "feedback"
    assert (await store.state()).exemplar_version == sum(results)
    delta = await store.exemplars_since(0)
    assert [e.id for e in delta.upserted] == [final.id]


async def test_concurrent_tool_upserts_each_bump_once(store: Store) -> None:
    """Twenty concurrent catalog writes are all kept and each moves catalog_version once."""
    await asyncio.gather(*(store.upsert_tools([tool(f"tool{i:02d}")]) for i in range(20)))
    assert len(await store.list_tools()) == 20
    assert (await store.state()).catalog_version == 20


# --- batches --------------------------------------------------------------------------------


async def test_batch_of_saves_moves_the_version_once(store: Store) -> None:
    """Many saves in one call land together under one new exemplar version."""
    await seed_tools(store, "t", "u")
    batch = [exemplar(f"batch {i}", "tu"[i % 2]) for i in range(50)]
    before = await store.state()
    result = await store.save_exemplars(batch)
    after = await store.state()
    assert after.exemplar_version == before.exemplar_version + 1
    assert [e.id for e in result.changed] == [e.id for e in batch]
    assert {e.version for e in result.changed} == {after.exemplar_version}
    assert result.unknown_tool == ()
    delta = await store.exemplars_since(before.exemplar_version)
    assert {e.id for e in delta.upserted} == {e.id for e in batch}


async def test_batch_refuses_downgrades_against_stored_and_within(store: Store) -> None:
    """A weaker label loses to a stored stronger one and to a stronger one earlier in the batch."""
    await seed_tools(store, "a", "b")
    await save_one(store, exemplar("stored teacher", "a", "teacher"))
    strong = exemplar("inside", "a", "feedback")
    result = await store.save_exemplars(
        [
            exemplar("Stored  Teacher", "b", "ranker"),  # weaker than what is stored
            strong,
            exemplar("INSIDE", "b", "teacher"),  # weaker than the earlier item of the batch
        ]
    )
    assert [e.id for e in result.changed] == [strong.id]
    kept = await lookup_one(store, "stored teacher")
    assert kept is not None and (kept.tool, kept.tier) == ("a", "teacher")
    same_exemplar(await lookup_one(store, "inside"), strong)


async def test_an_older_replayed_human_label_leaves_a_later_stored_one(store: Store) -> None:
    """A replayed human label made before the stored human label of its request (another
    replica's, saved while this one spooled it) is left by the save itself, read and decided in
    its transaction, and named in `overtaken`; a human label of the same time replaces it."""
    await seed_tools(store, "a", "b")
    later = exemplar("Asked By Hand", "a", "feedback", at=NOW)
    assert await save_one(store, later)
    older = exemplar("asked by hand", "b", "feedback", at=NOW - timedelta(minutes=1))
    before = await store.state()
    result = await store.save_exemplars([older], replayed=True)
    same_exemplar(await lookup_one(store, "asked by hand"), later)
    assert result.changed == () and [e.id for e in result.overtaken] == [older.id]
    assert await store.state() == before
    same_time = exemplar("ASKED by hand", "b", "feedback", at=NOW)
    result = await store.save_exemplars([same_time], replayed=True)
    assert [e.id for e in result.changed] == [same_time.id] and result.overtaken == ()
    same_exemplar(await lookup_one(store, "asked by hand"), same_time)


async def test_a_live_human_label_replaces_a_later_stamped_one(store: Store) -> None:
    """A human label saved live replaces the stored human label of its request even when that
    one's time is later (another replica's clock running ahead): it is the latest word."""
    await seed_tools(store, "a", "b")
    ahead = exemplar("Asked By Hand", "a", "feedback", at=NOW + timedelta(minutes=2))
    assert await save_one(store, ahead)
    live = exemplar("asked by hand", "b", "feedback", at=NOW)
    result = await store.save_exemplars([live])
    assert [e.id for e in result.changed] == [live.id] and result.overtaken == ()
    same_exemplar(await lookup_one(store, "asked by hand"), live)


async def test_batch_duplicates_apply_in_order(store: Store) -> None:
    """Two items of one query in a batch apply in order: the later one wins unless weaker."""
    await seed_tools(store, "a", "b", "c")
    first = exemplar("Twice", "a", "ranker")
    second = exemplar("twice", "b", "teacher")
    repeat = exemplar("TWICE", "b", "teacher")  # same tool and tier as the item before: no change
    result = await store.save_exemplars([first, second, repeat])
    assert [e.id for e in result.changed] == [first.id, second.id]
    same_exemplar(await lookup_one(store, "twice"), second)
    assert [e.id for e in await store.exemplars_for_tool("b")] == [second.id]
    assert await store.exemplars_for_tool("a") == []
    delta = await store.exemplars_since(0)
    assert [e.id for e in delta.upserted] == [second.id] and delta.deleted == ()


async def test_batch_reports_unknown_tools_without_raising(store: Store) -> None:
    """Labels for tools outside the catalog are skipped and reported; the rest are saved."""
    await seed_tools(store, "known")
    ghost = exemplar("ghost query", "ghost")
    good = exemplar("good query", "known")
    result = await store.save_exemplars([ghost, good])
    assert [e.id for e in result.unknown_tool] == [ghost.id]
    assert [e.id for e in result.changed] == [good.id]
    assert await lookup_one(store, "ghost query") is None
    only_ghosts = await store.save_exemplars([exemplar("another ghost", "ghost")])
    assert only_ghosts.changed == () and len(only_ghosts.unknown_tool) == 1
    assert (await store.state()).exemplar_version == 1


async def test_replaying_a_batch_changes_nothing(store: Store) -> None:
    """The same batch saved twice changes the store once: the replay is no change at all."""
    await seed_tools(store, "t", "u")
    batch = [exemplar(f"replay {i}", "tu"[i % 2], TIERS[i % 3]) for i in range(12)]
    assert len((await store.save_exemplars(batch)).changed) == 12
    before = await store.state()
    replay = await store.save_exemplars(batch)
    assert replay.changed == () and replay.unknown_tool == ()
    assert await store.state() == before
    assert (await store.exemplars_since(before.exemplar_version)).upserted == ()


async def test_empty_batch_is_no_change(store: Store) -> None:
    """Saving and looking up nothing answers empty and leaves the versions alone."""
    before = await store.state()
    assert await store.save_exemplars([]) == SaveResult()
    assert await store.exemplars_for_queries([]) == {}
    assert await store.state() == before


async def test_retention_runs_once_per_batch(store_factory: StoreFactory) -> None:
    """A batch past the per-tool and total caps keeps the newest, by creation time then id."""
    store = await store_factory.make(Retention(per_tool=3, total=5))
    await seed_tools(store, "t", "u")
    old = NOW - timedelta(days=1)
    # Equal creation times tie; the tie at the cut goes by id (descending), whatever the order.
    batch = [exemplar(f"t {i}", "t", at=old, exemplar_id=f"id-{i}") for i in (2, 0, 4, 1, 3)]
    batch += [exemplar(f"u {i}", "u", at=NOW + timedelta(seconds=i)) for i in range(3)]
    before = await store.state()
    result = await store.save_exemplars(batch)
    assert len(result.changed) == 8
    assert [e.query for e in await store.exemplars_for_tool("t")] == ["t 4", "t 3"]
    assert [e.query for e in await store.exemplars_for_tool("u")] == ["u 2", "u 1", "u 0"]
    delta = await store.exemplars_since(before.exemplar_version)
    assert delta.version == before.exemplar_version + 1
    assert set(delta.deleted) == {"t 0", "t 1", "t 2"}
    assert {e.query for e in delta.upserted} == {"t 3", "t 4", "u 0", "u 1", "u 2"}


async def test_retention_by_age_per_batch_spares_feedback(store_factory: StoreFactory) -> None:
    """Expired machine labels go at the next batch, an expired label in the batch itself too;
    feedback stays however old."""
    clock = FakeClock(NOW)
    store = await store_factory.make(Retention(max_age_days=10), clock=clock)
    await seed_tools(store, "t")
    await store.save_exemplars(
        [exemplar("aging", "t", at=NOW), exemplar("human", "t", "feedback", at=NOW)]
    )
    clock.set(NOW + timedelta(days=11))
    result = await store.save_exemplars(
        [
            exemplar("fresh", "t", at=clock()),
            exemplar("stale on arrival", "t", at=NOW - timedelta(days=30)),
        ]
    )
    assert len(result.changed) == 2
    assert [e.query for e in await store.exemplars_for_tool("t")] == ["fresh", "human"]
    assert set((await store.exemplars_since(0)).deleted) == {"aging", "stale on arrival"}


async def test_exemplars_for_queries_hits_misses_and_normalisation(store: Store) -> None:
    """One lookup answers the stored labels by normalised query; misses are absent."""
    await seed_tools(store, "a", "b")
    first = exemplar("Weather in Turin", "a")
    second = exemplar("open the PR", "b", "teacher")
    hostile = exemplar("Query " + NASTY, "a")
    await store.save_exemplars([first, second, hostile])
    found = await store.exemplars_for_queries(
        ["  WEATHER in turin", "weather in turin", "Open The Pr", "never seen", "Query " + NASTY]
    )
    assert set(found) == {"weather in turin", "open the pr", normalise_query("Query " + NASTY)}
    same_exemplar(found["weather in turin"], first)
    same_exemplar(found["open the pr"], second)
    same_exemplar(found[normalise_query("Query " + NASTY)], hostile)
    assert await store.exemplars_for_queries(["never seen"]) == {}


async def test_a_batch_failing_midway_writes_nothing(store: Store) -> None:
    """A batch the store refuses part way (an exemplar id reused by another query) is rolled
    back whole: one transaction, so none of its labels and no version are kept."""
    await seed_tools(store, "t")
    before = await store.state()
    batch = [
        exemplar("first", "t", exemplar_id="ex-shared"),
        exemplar("second", "t"),
        exemplar("third", "t", exemplar_id="ex-shared"),
    ]
    with pytest.raises(StoreError):
        await store.save_exemplars(batch)
    assert await store.state() == before
    assert await store.exemplars_for_queries(["first", "second", "third"]) == {}


# --- rules both stores must agree on ------------------------------------------------------


async def test_a_name_sent_twice_in_one_upsert_is_one_tool(store: Store) -> None:
    """Two definitions of one name in one call count once, the last definition winning."""
    result = await store.upsert_tools([tool("a", "first"), tool("b"), tool("a", "second")])
    assert (result.upserted, result.unchanged) == (2, 0)
    assert [t.name for t in await store.list_tools()] == ["a", "b"]
    stored = await store.get_tool("a")
    assert stored is not None and stored.description == "second"
    again = await store.upsert_tools([tool("a", "second"), tool("a", "second")], pack="kit")
    assert (again.upserted, again.unchanged) == (0, 1)


async def test_saving_the_same_batch_twice_changes_nothing_the_second_time(store: Store) -> None:
    """A batch of labels replayed as it was (a spool replay after a crash) is a no-op: no
    change reported, no version moved, one copy of each label."""
    await seed_tools(store, "t", "u")
    batch = [
        exemplar("first query", "t", "teacher", exemplar_id="ex-1"),
        exemplar("second query", "u", "feedback", exemplar_id="ex-2"),
        exemplar("third query", "t", "ranker", exemplar_id="ex-3"),
    ]
    assert len((await store.save_exemplars(batch)).changed) == 3
    before = await store.state()
    again = await store.save_exemplars(batch)
    assert again.changed == () and again.unknown_tool == () and again.evicted == 0
    assert await store.state() == before
    assert (await store.exemplars_since(before.exemplar_version)).upserted == ()
    assert sorted(e.id for e in await store.exemplars_for_tool("t")) == ["ex-1", "ex-3"]
    assert [e.id for e in await store.exemplars_for_tool("u")] == ["ex-2"]


async def test_retention_ties_on_creation_time_go_by_version_then_id(
    store_factory: StoreFactory,
) -> None:
    """Exemplars created at the same instant are evicted lowest version first, and within one
    version (one batch) lowest id first."""
    store = await store_factory.make(Retention(per_tool=100, total=2))
    await seed_tools(store, "t")
    for exemplar_id in ("ex-z", "ex-y", "ex-x"):  # later saves, higher versions, lower ids
        await save_one(store, exemplar(f"query {exemplar_id}", "t", exemplar_id=exemplar_id))
    assert sorted(e.id for e in await store.exemplars_for_tool("t")) == ["ex-x", "ex-y"]

    for kept in ("ex-x", "ex-y"):
        assert await store.delete_exemplar(kept)
    batch = [exemplar(f"query {i}", "t", exemplar_id=i) for i in ("ex-b", "ex-c", "ex-a")]
    assert (await store.save_exemplars(batch)).evicted == 1
    assert sorted(e.id for e in await store.exemplars_for_tool("t")) == ["ex-b", "ex-c"]


async def test_retention_agrees_with_the_shared_rules_on_ties(store_factory: StoreFactory) -> None:
    """Batch after batch of labels tied on creation time (across versions, within a version,
    ids in and beyond the Basic Multilingual Plane), both stores keep exactly what
    `plan_saves` and `evictions` predict, in `newest_first` order."""
    clock = [NOW]
    limits = Retention(per_tool=2, total=4, max_age_days=1)
    store = await store_factory.make(limits, clock=lambda: clock[0])
    await seed_tools(store, "t", "u")
    model: dict[str, Exemplar] = {}
    version = 0
    ids = ["a", "\uffff", "z", "\U0001f6e0", "\u00e9", "B"]  # same-tool ties across planes
    for step in range(6):
        clock[0] = NOW + timedelta(hours=6 * step)
        batch = [
            exemplar(
                f"query {(step * 5 + i) % 11}",
                "tu"[(step + i) % 2],
                TIERS[(step * 7 + i) % 3],
                at=NOW + timedelta(hours=6 * (step // 2)),  # pairs of batches share a time
                exemplar_id=f"ex-{ids[(step + i) % len(ids)]}-{step}",
            )
            for i in range(5)
        ]
        labels = {k: StoredLabel(e.tool, e.tier) for k, e in model.items()}
        plan = plan_saves(batch, labels, {"t", "u"})
        result = await store.save_exemplars(batch)
        assert [e.id for e in result.changed] == [e.id for e in plan.changing]
        if plan.changing:
            version += 1
            model.update({e.query_norm: replace(e, version=version) for e in plan.written})
            gone = evictions(retention_plan(limits, clock[0], plan.tools), model.values())
            for victim in gone:
                del model[victim.query_norm]
            assert result.evicted == len(gone)
        for name in "tu":
            want = sorted(
                (e for e in model.values() if e.tool == name), key=newest_first, reverse=True
            )
            got = await store.exemplars_for_tool(name)
            assert [(e.id, e.version) for e in got] == [(e.id, e.version) for e in want]
