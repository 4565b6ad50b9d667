"""The agent as the first oracle: turns that worked label their request (tier `usage`), with the
learner's real parts (hashing embedder, centroid ranker, SQLite, the Anthropic SDK against a
local Messages stub)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from tests.learn.test_learner import LOW_MARGIN, TOOLS, Harness, teacher_answers
from tests.stubs import Stub
from toolselect.catalog import tool_text
from toolselect.learn.records import Observation
from toolselect.records import Exemplar, Tool
from toolselect.store.port import lookup_one
from toolselect.store.sqlite.store import SqliteStore


def observation(request: str, used_tool: str, **fields: object) -> Observation:
    return Observation(
        request=request,
        used_tool=used_tool,
        turn_id=str(fields.pop("turn_id", uuid.uuid4().hex)),
        at=datetime.now(UTC),
        **fields,  # type: ignore[arg-type]
    )


async def test_a_turn_that_worked_labels_its_request_with_the_used_tool(harness: Harness) -> None:
    """`ok` with a catalog tool: one usage exemplar; the same query again counts, not adds."""
    harness.learner.observe("mail the invoice to Anna", "send_email", turn_id="u1", outcome="ok")
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn("u1")
    assert turn is not None and (turn.tier, turn.label, turn.result) == (
        "usage", "send_email", "labeled",
    )  # fmt: skip
    stored = await lookup_one(harness.store, "mail the invoice to anna")
    assert stored is not None and (stored.tool, stored.tier, stored.count) == (
        "send_email", "usage", 1,
    )  # fmt: skip
    harness.learner.observe("Mail the invoice to  Anna", "send_email", turn_id="u2", outcome="ok")
    assert await harness.learner.drain(30.0)
    again = await lookup_one(harness.store, "mail the invoice to anna")
    assert again is not None and (again.tool, again.count) == ("send_email", 2)
    assert len(await harness.store.exemplars_for_tool("send_email")) == 1
    assert harness.stub.received == []
    assert [e.count for e in harness.saved] == [1, 2]


async def test_a_turn_sent_again_counts_once_whatever_came_between(harness: Harness) -> None:
    """A, B, A: the second A is the same turn (a retry after a lost answer), not a third
    sighting, and its stored record keeps the time it first came; a repeat inside one batch
    is the same. Both resends are counted in `toolselect_observe_resent_total`."""
    query = "mail the invoice to Anna"
    harness.learner.observe(query, "send_email", turn_id="a", outcome="ok")
    assert await harness.learner.drain(30.0)
    first = await harness.store.get_turn("a")
    harness.learner.observe(query, "send_email", turn_id="b", outcome="ok")
    assert await harness.learner.drain(30.0)
    harness.learner.observe(query, "send_email", turn_id="a", outcome="ok")
    assert await harness.learner.drain(30.0)
    stored = await lookup_one(harness.store, query)
    assert stored is not None and stored.count == 2
    assert await harness.store.get_turn("a") == first
    assert harness.counter("observe_resent") == 1
    for _ in range(2):  # one batch: the first is new, the second the same turn
        harness.learner.observe(query, "send_email", turn_id="c", outcome="ok")
    assert await harness.learner.drain(30.0)
    stored = await lookup_one(harness.store, query)
    assert stored is not None and stored.count == 3
    assert harness.counter("observe_resent") == 2
    assert [e.count for e in harness.saved] == [1, 2, 3]


async def test_a_blank_request_is_recorded_and_teaches_nothing(harness: Harness) -> None:
    """A turn with a blank request is recorded (analytics count it) but labels nothing, and a
    fallback on it is no reason to pay the teacher."""
    harness.learner.observe("", "send_email", turn_id="empty", outcome="ok")
    harness.learner.observe(" \t\n", "shell_exec", turn_id="blank", outcome="error")
    harness.learner.observe("\u200b\u2060", "send_email", turn_id="unprinted", outcome="ok")
    assert await harness.learner.drain(30.0)
    for turn_id in ("empty", "blank", "unprinted"):
        turn = await harness.store.get_turn(turn_id)
        assert turn is not None and (turn.flagged, turn.tier, turn.label) == (False, None, None)
        assert (turn.top1, turn.margin) == (None, None)  # all-zero scores rank nothing
    assert harness.saved == []
    assert harness.stub.received == []


async def test_agents_that_use_the_right_tool_more_often_overturn_a_wrong_first_label(
    harness: Harness,
) -> None:
    """Two turns that worked with a wrong tool, then six with the right one: the right tool
    ends up the label, its count its lead of 4 (a running majority), where counting only the
    stored tool's sightings kept the first claim for good."""
    query = "mail the invoice to Anna"
    for i in range(2):
        harness.learner.observe(query, "get_weather", turn_id=f"wrong-{i}", outcome="ok")
    assert await harness.learner.drain(30.0)
    for i in range(6):
        harness.learner.observe(query, "send_email", turn_id=f"right-{i}", outcome="ok")
        assert await harness.learner.drain(30.0)
    stored = await lookup_one(harness.store, query)
    assert stored is not None and (stored.tool, stored.tier, stored.count) == (
        "send_email", "usage", 4,
    )  # fmt: skip


async def test_failed_turns_never_label_the_tool_that_failed(harness: Harness) -> None:
    """`error` and `corrected` are flagged `failed` and go to the teacher; the used tool is
    never saved as the label."""
    harness.stub.reply(teacher_answers("crypto_price"))
    harness.learner.observe(LOW_MARGIN, "web_search", turn_id="f1", outcome="error")
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn("f1")
    assert turn is not None
    assert (turn.flag_reason, turn.tier, turn.label) == ("failed", "teacher", "crypto_price")
    assert len(harness.stub.received) == 1
    assert [(e.tool, e.tier) for e in harness.saved] == [("crypto_price", "teacher")]
    harness.learner.observe("weather in Turin", "get_weather", turn_id="f2", outcome="corrected")
    assert await harness.learner.drain(30.0)
    assert all(e.tool != "get_weather" for e in harness.saved)


async def test_without_an_outcome_only_a_tool_that_was_shown_labels(harness: Harness) -> None:
    """The default rule (`shown`): a turn without an outcome labels its tool only when its
    search showed it."""
    shown = observation(
        "forecast for Rome",
        "get_weather",
        search_id="s1",
        search_status="shown",
        shown=("get_weather", "web_search"),
        shown_position=1,
    )
    unseen = observation(
        "forecast for Oslo", "get_weather", search_id="s2", search_status="unknown"
    )
    bare = observation("forecast for Paris", "get_weather")
    for obs in (shown, unseen, bare):
        assert harness.learner.offer(obs)
    assert await harness.learner.drain(30.0)
    assert [e.query for e in harness.saved] == ["forecast for Rome"]
    turn = await harness.store.get_turn(shown.turn_id)
    assert turn is not None
    assert (turn.search_id, turn.search_status, turn.shown_position, turn.shown_k) == (
        "s1", "shown", 1, 2,
    )  # fmt: skip
    # Another process's search id names its first 48 tools and counts the rest.
    counted = observation(
        "forecast for Bern", "get_weather", search_id="s3", search_status="shown",
        shown=("get_weather",), shown_position=1, shown_k=1000,
    )  # fmt: skip
    assert harness.learner.offer(counted)
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn(counted.turn_id)
    assert turn is not None and turn.shown_k == 1000


async def test_used_names_resolve_by_bare_name_and_fallbacks_never_label(
    harness: Harness,
) -> None:
    harness.learner.observe("send a mail to Bo", "gmail__send_email", outcome="ok")
    harness.learner.observe("list the folder", "shell_exec", outcome="ok")
    harness.learner.observe("book a table", "book_table", outcome="ok")  # not in the catalog
    assert await harness.learner.drain(30.0)
    assert [(e.query, e.tool, e.tier) for e in harness.saved if e.tier == "usage"] == [
        ("send a mail to Bo", "send_email", "usage")
    ]


async def test_packs_are_respected(harness: Harness) -> None:
    """A used tool outside the turn's pack does not label it; inside it does."""
    packed = [Tool(t.name, t.description, packs=("mail",) if t.name == "send_email" else ())
              for t in TOOLS]  # fmt: skip
    harness.ranker.set_catalog(packed, await harness.embedder.embed([tool_text(t) for t in packed]))
    harness.learner.observe("weather in Nice", "get_weather", pack="mail", outcome="ok")
    harness.learner.observe("email Carla", "send_email", pack="mail", outcome="ok")
    assert await harness.learner.drain(30.0)
    assert [e.tool for e in harness.saved if e.tier == "usage"] == ["send_email"]


async def test_a_usage_label_never_overrides_a_teacher_or_human_label(harness: Harness) -> None:
    now = datetime.now(UTC)
    vector = tuple((await harness.embedder.embed(["price of ether"]))[0].tolist())
    human = Exemplar("h1", "price of ether", "crypto_price", "feedback", "hashing", vector, now)
    assert (await harness.store.save_exemplars([human])).changed
    harness.learner.observe("price of ether", "web_search", outcome="ok")
    assert await harness.learner.drain(30.0)
    stored = await lookup_one(harness.store, "price of ether")
    assert stored is not None and (stored.tool, stored.tier) == ("crypto_price", "feedback")


async def test_a_fallback_the_agent_was_shown_the_top1_for_goes_to_the_teacher(
    harness: Harness,
) -> None:
    """The agent saw the ranker's confident top-1 and improvised: the free tier must not
    label it with that tool; the teacher is asked (and is always worth a call)."""
    harness.stub.reply(teacher_answers("web_search"))
    obs = observation(
        "send an email message to Marco",
        "shell_exec",
        outcome="ok",
        search_id="s3",
        search_status="not_shown",
        shown=("send_email", "get_weather"),
    )
    assert harness.learner.offer(obs)
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn(obs.turn_id)
    assert turn is not None and (turn.flag_reason, turn.tier, turn.label) == (
        "fallback", "teacher", "web_search",
    )  # fmt: skip
    assert len(harness.stub.received) == 1


async def test_a_deep_teacher_listing_puts_the_tools_the_agent_passed_over_last(
    sqlite_store: SqliteStore, anthropic_stub: Stub
) -> None:
    """Past the full-catalog size the teacher sees the ranked top N; for a fallback whose
    search showed tools the agent did not use, deeper ones are shown first and those last."""
    h = Harness(sqlite_store, anthropic_stub, teacher_full_catalog=2, teacher_candidates=3)
    await h.load_catalog()
    h.learner.start()
    try:
        anthropic_stub.reply(teacher_answers("crypto_price"))
        request = "send an email message to Marco"
        vector = (await h.embedder.embed([request]))[0]
        ranked = h.ranker.rank(vector, 5).tools
        obs = observation(
            request, "shell_exec", search_id="s", search_status="not_shown", shown=ranked[:2]
        )
        assert h.learner.offer(obs)
        assert await h.learner.drain(30.0)
        tool = anthropic_stub.received[0].body["tools"][0]
        offered = [n for n in tool["input_schema"]["properties"]["tool"]["enum"] if n != "none"]
        assert offered == list(ranked[2:5])
        # A search that showed all but one tool: the passed-over ones come after it, so the
        # teacher still has tools to choose from rather than the one left (or none).
        other = "write an email message to Marco"  # no label yet: not answered by the ratchet
        vector = (await h.embedder.embed([other]))[0]
        everything = h.ranker.rank(vector, h.ranker.snapshot.size).tools
        anthropic_stub.reply(teacher_answers("crypto_price"))
        obs = observation(
            other, "shell_exec", search_id="t", search_status="not_shown", shown=everything[:-1]
        )
        assert h.learner.offer(obs)
        assert await h.learner.drain(30.0)
        tool = anthropic_stub.received[1].body["tools"][0]
        offered = [n for n in tool["input_schema"]["properties"]["tool"]["enum"] if n != "none"]
        assert offered == [everything[-1], *everything[:2]]
    finally:
        await h.learner.close(1.0)
        await h.teacher.aclose()
