"""The learner with real parts: hashing embedder, centroid ranker, SQLite or a silent Bolt peer,
and the real Anthropic SDK against a local Messages stub."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import neo4j
import pytest_asyncio

from tests.stubs import Reply, Stub, anthropic_message
from toolselect.catalog import tool_text
from toolselect.clock import utc_now
from toolselect.embed import HashingEmbedder
from toolselect.learn.fit import FitPolicy, FoldWeights
from toolselect.learn.learner import Learner, LearnerConfig
from toolselect.learn.records import Observation
from toolselect.learn.tuning import Tuner
from toolselect.metrics import Metrics
from toolselect.names import DEFAULT_FALLBACK_TOOLS
from toolselect.oracle.anthropic import AnthropicTeacher, anthropic_client
from toolselect.oracle.budget import Budget, RetryPolicy
from toolselect.oracle.oracle import SHUTDOWN, Oracle
from toolselect.ranker import CentroidRanker
from toolselect.records import Exemplar, SaveResult, Tool, Turn
from toolselect.store.neo4j.store import Neo4jStore
from toolselect.store.port import Store, lookup_one
from toolselect.store.sqlite.store import SqliteStore
from toolselect.testing import memory_store

TOOLS = [
    Tool("get_weather", "Current weather and forecast for a city: temperature, rain, wind."),
    Tool("send_email", "Send an email message to a recipient with a subject and body."),
    Tool("web_search", "Search the web for pages matching a query and return links."),
    Tool("crypto_price", "Current price of a cryptocurrency such as bitcoin or ether."),
    Tool("shell_exec", "Run a shell command on the host and return its output."),
]


# The hashing ranker is unsure about this one (top-1 web_search, margin about 0.02 < 0.05).
LOW_MARGIN = "il prezzo di BTC ora"


class Harness:
    """A learner over real components, with what it saved collected for assertions."""

    def __init__(
        self,
        store: Store,
        stub: Stub,
        *,
        queue_size: int = 1024,
        batch_size: int = 512,
        overlap_writes: bool = False,
        teacher_full_catalog: int = 50,
        teacher_candidates: int = 30,
        tuned: bool = False,
    ) -> None:
        self.store = store
        self.stub = stub
        self.embedder = HashingEmbedder()
        self.ranker = CentroidRanker()
        self.tuner = SpyTuner(self.ranker) if tuned else None
        self.metrics = Metrics()
        self.saved: list[Exemplar] = []
        self.teacher = AnthropicTeacher(
            anthropic_client(api_key="test", base_url=stub.url, timeout_s=5.0)
        )
        self.oracle = Oracle(
            self.teacher,
            enabled=True,
            budget=Budget(60),
            retry=RetryPolicy(retries=0),
            timeout_s=5.0,
            record_call=store.record_oracle_call,
            metrics=self.metrics,
        )
        self.learner = Learner(
            store=store,
            embedder=self.embedder,
            ranker=self.ranker,
            oracle=self.oracle,
            on_saved=self._on_saved,
            describe=lambda name: name,
            config=LearnerConfig(
                fallback_tools=DEFAULT_FALLBACK_TOOLS,
                margin_floor=0.05,
                queue_size=queue_size,
                batch_size=batch_size,
                overlap_writes=overlap_writes,
                teacher_full_catalog=teacher_full_catalog,
                teacher_candidates=teacher_candidates,
            ),
            tuner=self.tuner,
            metrics=self.metrics,
        )

    async def _on_saved(self, result: SaveResult) -> None:
        self.saved.extend(result.changed)

    async def load_catalog(self) -> None:
        self.ranker.set_catalog(TOOLS, await self.embedder.embed([tool_text(t) for t in TOOLS]))

    def counter(self, name: str, **labels: str) -> float:
        value = self.metrics.value(f"toolselect_{name}_total", labels)
        return value or 0.0


class SpyTuner(Tuner):
    """A tuner over its own ranker that notes what it is told of the teacher's answers."""

    def __init__(self, ranker: CentroidRanker) -> None:
        super().__init__(ranker, FitPolicy(prior=FoldWeights(16.0)), embedder="hashing")
        self.answers: list[tuple[int, int | None]] = []

    def teacher_answered(self, shown: int, position: int | None) -> None:
        self.answers.append((shown, position))
        super().teacher_answered(shown, position)


def teacher_answers(tool: str) -> Reply:
    return Reply(body=anthropic_message(tool))


@pytest_asyncio.fixture(loop_scope="function")
async def sqlite_store() -> AsyncIterator[SqliteStore]:
    async with memory_store(TOOLS) as store:
        yield store


@pytest_asyncio.fixture(loop_scope="function")
async def harness(sqlite_store: SqliteStore, anthropic_stub: Stub) -> AsyncIterator[Harness]:
    h = Harness(sqlite_store, anthropic_stub)
    await h.load_catalog()
    h.learner.start()
    yield h
    await h.learner.close(1.0)
    await h.teacher.aclose()


async def test_every_turn_is_recorded_and_unflagged_turns_cost_nothing(harness: Harness) -> None:
    """A well-routed turn is recorded unflagged; no teacher request is made."""
    assert harness.learner.observe("weather in Turin tomorrow", "get_weather", turn_id="t1")
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn("t1")
    assert turn is not None and not turn.flagged and turn.top1 == "get_weather"
    assert harness.stub.received == []


async def test_confident_fallback_turn_is_labelled_by_the_ranker(harness: Harness) -> None:
    """A fallback turn with a confident ranker is labelled with its top-1 for free."""
    harness.learner.observe("send an email message to Marco", "shell_exec", turn_id="t2")
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn("t2")
    assert turn is not None
    assert (turn.flagged, turn.flag_reason, turn.tier, turn.result, turn.label) == (
        True, "fallback", "ranker", "labeled", "send_email",
    )  # fmt: skip
    assert [e.tool for e in harness.saved] == ["send_email"]
    assert harness.stub.received == []
    assert harness.counter("flagged_turns", reason="fallback") == 1


async def test_low_margin_fallback_turn_is_escalated_to_the_teacher(harness: Harness) -> None:
    """A fallback turn the ranker is unsure about is labelled by the teacher and saved."""
    vector = (await harness.embedder.embed([LOW_MARGIN]))[0]
    assert harness.ranker.rank(vector, 2).margin < 0.05
    harness.stub.reply(teacher_answers("crypto_price"))
    harness.learner.observe(LOW_MARGIN, "shell_exec", turn_id="t3")
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn("t3")
    assert turn is not None
    assert (turn.tier, turn.result, turn.label) == ("teacher", "labeled", "crypto_price")
    assert len(harness.stub.received) == 1
    sent = harness.stub.received[0].body
    assert LOW_MARGIN in str(sent["messages"])
    calls = await harness.store.oracle_calls("t3")
    assert [c.result for c in calls] == ["labeled"]
    exemplar = await lookup_one(harness.store, LOW_MARGIN.upper())
    assert exemplar is not None and exemplar.tier == "teacher" and exemplar.tool == "crypto_price"


async def test_a_taught_turn_sent_again_is_left_as_the_teacher_decided(
    harness: Harness,
) -> None:
    """The resend of a turn the teacher labelled is neither decided again (by the ratchet its
    label now feeds) nor recorded over the teacher's decision."""
    harness.stub.reply(teacher_answers("crypto_price"))
    harness.learner.observe(LOW_MARGIN, "shell_exec", turn_id="taught")
    assert await harness.learner.drain(30.0)
    taught = await harness.store.get_turn("taught")
    assert taught is not None and (taught.tier, taught.label) == ("teacher", "crypto_price")
    harness.learner.observe(LOW_MARGIN, "shell_exec", turn_id="taught")
    assert await harness.learner.drain(30.0)
    assert await harness.store.get_turn("taught") == taught
    assert len(harness.stub.received) == 1
    assert harness.counter("oracle_decisions", tier="ratchet", result="labeled") == 0


async def test_a_teacher_label_for_a_tool_gone_from_the_catalog_is_declined(
    harness: Harness,
) -> None:
    """The teacher picks a tool that left the store's catalog while it answered (the ranker
    still held it): nothing is saved, and the turn says so instead of `labeled`."""
    assert await harness.store.delete_tool("crypto_price")
    harness.stub.reply(teacher_answers("crypto_price"))
    harness.learner.observe(LOW_MARGIN, "shell_exec", turn_id="gone")
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn("gone")
    assert turn is not None and (turn.tier, turn.result, turn.label) == (
        "teacher",
        "declined",
        None,
    )
    assert harness.saved == []
    assert harness.counter("oracle_decisions", tier="teacher", result="declined") == 1


async def test_the_trace_and_the_tuner_say_declined_for_a_label_not_kept(
    sqlite_store: SqliteStore, anthropic_stub: Stub
) -> None:
    """The teacher's pick leaves the catalog while it answers: the call is traced `declined`,
    as the turn ends, and the tuner hears the teacher found no tool, not that it found one."""
    h = Harness(sqlite_store, anthropic_stub, tuned=True)
    assert h.tuner is not None
    await h.load_catalog()
    h.learner.start()
    try:
        assert await h.store.delete_tool("crypto_price")
        anthropic_stub.reply(teacher_answers("crypto_price"))
        h.learner.observe(LOW_MARGIN, "shell_exec", turn_id="gone")
        assert await h.learner.drain(30.0)
        turn = await h.store.get_turn("gone")
        assert turn is not None and (turn.result, turn.label) == ("declined", None)
        calls = await h.store.oracle_calls("gone")
        assert [(c.result, c.input_tokens) for c in calls] == [("declined", 120)]
        assert [position for _, position in h.tuner.answers] == [None]
    finally:
        await h.learner.close(1.0)
        await h.teacher.aclose()
        await h.tuner.close()


async def test_a_stored_label_the_agent_passed_over_is_taught_again(harness: Harness) -> None:
    """The teacher labelled a query wrongly; later the agent's search showed that tool and the
    agent fell back: the stored label does not settle the turn (it would answer every fallback
    its own pull causes) but the teacher is asked again, and its new answer replaces it."""
    harness.stub.reply(teacher_answers("web_search"), teacher_answers("crypto_price"))
    harness.learner.observe(LOW_MARGIN, "shell_exec", turn_id="first")
    assert await harness.learner.drain(30.0)
    wrong = await lookup_one(harness.store, LOW_MARGIN)
    assert wrong is not None and (wrong.tool, wrong.tier) == ("web_search", "teacher")
    passed = Observation.of(
        LOW_MARGIN, "shell_exec", {"turn_id": "passed"}, at=utc_now(),
        search_status="not_shown", shown=("web_search", "get_weather"),
    )  # fmt: skip
    assert harness.learner.offer(passed)
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn("passed")
    assert turn is not None and (turn.tier, turn.label) == ("teacher", "crypto_price")
    fixed = await lookup_one(harness.store, LOW_MARGIN)
    assert fixed is not None and (fixed.tool, fixed.tier) == ("crypto_price", "teacher")
    assert len(harness.stub.received) == 2


def passed_over_top1(outcome: str | None) -> Observation:
    """A turn whose search showed the ranker's confident top-1 (`send_email`) and the tool the
    agent used instead (`web_search`), at position 2."""
    return Observation.of(
        "send an email message to Marco", "web_search", {"turn_id": "seen", "outcome": outcome},
        at=utc_now(), search_status="shown", shown=("send_email", "web_search"),
        shown_position=2,
    )  # fmt: skip


async def test_a_top1_the_agent_passed_over_is_no_free_label_when_its_choice_may_have_worked(
    harness: Harness,
) -> None:
    """With no outcome the ranker does not label the request with the top-1 the agent looked
    at and chose against; the teacher is asked."""
    harness.stub.reply(teacher_answers("send_email"))
    assert harness.learner.offer(passed_over_top1(None))
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn("seen")
    assert turn is not None and turn.flagged and turn.top1 == "send_email"
    assert turn.tier == "teacher" and len(harness.stub.received) == 1


async def test_a_top1_the_agent_passed_over_for_a_tool_that_failed_is_a_free_label(
    harness: Harness,
) -> None:
    """The tool the agent chose failed: its choice is no evidence against the top-1, which
    labels the request for free (no teacher call)."""
    assert harness.learner.offer(passed_over_top1("error"))
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn("seen")
    assert turn is not None and turn.flagged and turn.top1 == "send_email"
    assert (turn.tier, turn.label) == ("ranker", "send_email")
    assert not harness.stub.received
    stored = await lookup_one(harness.store, "send an email message to Marco")
    assert stored is not None and (stored.tool, stored.tier) == ("send_email", "ranker")


BURST = {"first": LOW_MARGIN, "second": "prezzo BTC ora?", "third": "BTC adesso?"}


@asynccontextmanager
async def burst_past_the_budget(
    store: SqliteStore, stub: Stub
) -> AsyncIterator[tuple[Harness, list[float]]]:
    """A running learner whose hourly budget has room for one call, after three fallback turns
    (`BURST`); with the budget's clock (seconds, to move on)."""
    now = [0.0]
    h = Harness(store, stub)
    h.oracle.budget = Budget(1, clock=lambda: now[0])
    await h.load_catalog()
    h.learner.start()
    try:
        stub.reply(teacher_answers("crypto_price"))
        for turn_id, request in BURST.items():
            assert h.learner.observe(request, "shell_exec", turn_id=turn_id)
        assert await h.learner.drain(30.0)
        yield h, now
    finally:
        await h.learner.close(1.0)
        await h.teacher.aclose()


async def test_turns_the_spent_budget_refused_are_asked_about_once_it_has_room(
    sqlite_store: SqliteStore, anthropic_stub: Stub
) -> None:
    """A burst spends the hour's budget: the turns it refused are asked about, newest first,
    once the rolling hour frees slots, all but a query labelled meanwhile; none before."""
    async with burst_past_the_budget(sqlite_store, anthropic_stub) as (h, now):
        refused = [await h.store.get_turn(turn_id) for turn_id in ("second", "third")]
        assert [(t.tier, t.result) for t in refused if t] == [("teacher", "limit_reached")] * 2
        assert await h.learner.ask_again() == 0  # the hour is not over
        vector = tuple((await h.embedder.embed(["BTC adesso?"]))[0].tolist())
        human = Exemplar("h3", "BTC adesso?", "crypto_price", "feedback", "hashing", vector,
                         datetime.now(UTC))  # fmt: skip
        await h.store.save_exemplars([human])
        now[0] += 3601.0
        h.oracle.budget = Budget(2, clock=lambda: now[0])
        assert await h.learner.ask_again() == 1
        assert await h.learner.drain(30.0)
        second = await h.store.get_turn("second")
        assert second is not None and (second.tier, second.result, second.label) == (
            "teacher", "labeled", "crypto_price",
        )  # fmt: skip
        assert len(anthropic_stub.received) == 2
        assert h.counter("teacher_asked_again") == 1
        assert await h.learner.ask_again() == 0  # nothing left


async def test_a_refused_turn_that_worked_is_not_settled_by_its_own_usage_label(
    sqlite_store: SqliteStore, anthropic_stub: Stub
) -> None:
    """A disagreement on a turn that worked saves the agent's choice as a usage label and goes
    to the teacher; refused by the spent budget, that label of its own (the claim the flag
    questions, which the ratchet does not take either) does not settle it: it is asked about
    once the hour frees a slot."""
    now = [0.0]
    h = Harness(sqlite_store, anthropic_stub)
    h.oracle.budget = Budget(1, clock=lambda: now[0])
    while (slot := h.oracle.budget.reserve()) is not None:
        h.oracle.budget.settle(slot)
    await h.load_catalog()
    h.learner.start()
    try:
        anthropic_stub.reply(teacher_answers("send_email"))
        request = "send an email message to Marco"
        assert h.learner.observe(request, "web_search", turn_id="worked", outcome="ok")
        assert await h.learner.drain(30.0)
        turn = await h.store.get_turn("worked")
        assert turn is not None and (turn.flag_reason, turn.tier, turn.result) == (
            "disagreement", "teacher", "limit_reached",
        )  # fmt: skip
        own = await lookup_one(h.store, request)
        assert own is not None and (own.tool, own.tier) == ("web_search", "usage")
        now[0] += 3601.0
        assert await h.learner.ask_again() == 1
        assert await h.learner.drain(30.0)
        turn = await h.store.get_turn("worked")
        assert turn is not None and (turn.result, turn.label) == ("labeled", "send_email")
    finally:
        await h.learner.close(1.0)
        await h.teacher.aclose()


async def test_ratchet_reuses_a_label_without_a_teacher_call(harness: Harness) -> None:
    """A query that already has a label reuses it: no second teacher call."""
    harness.stub.reply(teacher_answers("crypto_price"))
    harness.learner.observe(LOW_MARGIN, "shell_exec", turn_id="a")
    assert await harness.learner.drain(30.0)
    harness.learner.observe("Il  prezzo di BTC ORA", "fs_read", turn_id="b")
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn("b")
    assert turn is not None and (turn.tier, turn.label) == ("ratchet", "crypto_price")
    assert len(harness.stub.received) == 1


async def test_teacher_error_saves_nothing_and_records_error(harness: Harness) -> None:
    """A failing teacher records the turn as `error` and saves no exemplar."""
    harness.stub.reply(Reply(status=500, body={"type": "error", "error": {"type": "api_error",
                                                                          "message": "x"}}))  # fmt: skip
    harness.learner.observe(LOW_MARGIN, "shell_exec", turn_id="t4")
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn("t4")
    assert turn is not None and turn.result == "error"
    assert harness.saved == []
    assert await lookup_one(harness.store, LOW_MARGIN) is None


async def test_spent_budget_builds_no_candidates_and_records_limit_reached(
    harness: Harness,
) -> None:
    """With the hourly budget spent an escalated turn is `limit_reached` at once: no request,
    and no candidate listing is ranked and costed for a call that cannot be made."""
    while (slot := harness.oracle.budget.reserve()) is not None:
        harness.oracle.budget.settle(slot)  # paid calls, not ones in flight
    harness.learner.observe(LOW_MARGIN, "shell_exec", turn_id="t5")
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn("t5")
    assert turn is not None and (turn.tier, turn.result) == ("teacher", "limit_reached")
    assert harness.stub.received == []
    shown = harness.metrics.value("toolselect_teacher_candidates_count")
    assert (shown or 0.0) == 0.0  # no series at all until a call is shown candidates


async def test_a_refused_turn_keeps_the_budget_that_refused_it_as_its_reason(
    sqlite_store: SqliteStore, anthropic_stub: Stub
) -> None:
    """Budget 1, three turns: the two refused are stored `limit_reached` naming the hourly
    budget; asked about again they count once more in the decisions, which then add up to the
    turns decided plus those asked about again."""
    async with burst_past_the_budget(sqlite_store, anthropic_stub) as (h, now):
        turns = [await h.store.get_turn(turn_id) for turn_id in BURST]
        refused = [t for t in turns if t is not None and t.result == "limit_reached"]
        assert [t.reason for t in refused] == ["hourly budget of 1 calls spent"] * 2
        now[0] += 3601.0
        h.oracle.budget = Budget(2, clock=lambda: now[0])
        assert await h.learner.ask_again() == 2
        assert await h.learner.drain(30.0)
        ended = [await h.store.get_turn(turn_id) for turn_id in BURST]
        assert [(t.result, t.reason) for t in ended if t] == [("labeled", None)] * 3
        decided = {
            result: h.counter("oracle_decisions", tier="teacher", result=result)
            for result in ("labeled", "limit_reached")
        }
        assert decided == {"labeled": 3, "limit_reached": 2}
        assert sum(decided.values()) == len(BURST) + h.counter("teacher_asked_again")


async def test_same_query_is_not_labelled_twice_at_once(harness: Harness) -> None:
    """Two turns of one normalised query in flight make one teacher call, not two."""
    harness.stub.reply(Reply(hang=True))
    harness.learner.observe(LOW_MARGIN, "shell_exec", turn_id="x1")
    harness.learner.observe("IL PREZZO di btc ora", "shell_exec", turn_id="x2")
    await asyncio.wait_for(harness.stub.arrived.wait(), 5.0)
    await asyncio.sleep(0.2)
    assert len(harness.stub.received) == 1
    second = await harness.store.get_turn("x2")
    assert second is not None and second.result == "declined"


async def test_full_queue_drops_and_counts(sqlite_store: SqliteStore, anthropic_stub: Stub) -> None:
    """Beyond the queue size observe() returns False at once and the drop is counted."""
    h = Harness(sqlite_store, anthropic_stub, queue_size=3)
    await h.load_catalog()
    h.learner.start()
    try:
        results = [h.learner.observe(f"weather {i}", "get_weather") for i in range(5)]
        assert results == [True, True, True, False, False]
        assert h.counter("observe_dropped", reason="queue_full") == 2
        assert await h.learner.drain(30.0)
    finally:
        await h.learner.close(1.0)
        await h.teacher.aclose()


async def test_observe_from_another_thread(harness: Harness) -> None:
    """observe() from a plain thread queues the turn and the worker records it."""
    outcome: list[bool] = []
    thread = threading.Thread(
        target=lambda: outcome.append(
            harness.learner.observe("weather", "get_weather", turn_id="th")
        )
    )
    thread.start()
    thread.join()
    assert outcome == [True]
    for _ in range(100):
        if await harness.store.get_turn("th") is not None:
            break
        await asyncio.sleep(0.05)
    assert await harness.store.get_turn("th") is not None


async def _silent_bolt_peer() -> tuple[asyncio.Server, list[int]]:
    """A TCP listener that accepts Bolt connections and never answers: a hung database."""
    accepted: list[int] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        await reader.read(1 << 20)  # until the client gives up

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    return server, accepted


async def test_observe_returns_promptly_while_store_and_teacher_hang(anthropic_stub: Stub) -> None:
    """With the store and the teacher both hung, observe() still returns at once, and the
    work demonstrably reaches the worker (which is then blocked on the store)."""
    server, accepted = await _silent_bolt_peer()
    port = server.sockets[0].getsockname()[1]
    driver = neo4j.AsyncGraphDatabase.driver(f"bolt://127.0.0.1:{port}", connection_timeout=60)
    store = Neo4jStore(driver, "neo4j", uri=f"bolt://127.0.0.1:{port}")
    anthropic_stub.reply(Reply(hang=True))
    h = Harness(store, anthropic_stub)
    await h.load_catalog()
    h.learner.start()
    try:
        durations = []
        for i in range(200):
            started = time.perf_counter()
            assert h.learner.observe(f"{LOW_MARGIN} {i}", "shell_exec")
            durations.append(time.perf_counter() - started)
        durations.sort()
        assert durations[len(durations) // 2] < 0.001, durations[len(durations) // 2]
        assert durations[-1] < 0.05, durations[-1]
        for _ in range(100):
            if accepted:
                break
            await asyncio.sleep(0.05)
        assert accepted, "the worker never reached the store"
        assert h.learner.stats.in_progress == 1
    finally:
        await h.learner.close(0.2)
        await h.teacher.aclose()
        await driver.close()
        server.close()


async def test_cancelled_turn_saves_nothing(harness: Harness) -> None:
    """Closing the learner while the teacher hangs cancels the call and saves nothing; the
    turn ends `error` in the store (not undecided for good) and the cut call is traced."""
    harness.stub.reply(Reply(hang=True))
    harness.learner.observe(LOW_MARGIN, "shell_exec", turn_id="c1")
    await asyncio.wait_for(harness.stub.arrived.wait(), 5.0)
    await harness.learner.close(0.2)
    assert harness.saved == []
    assert await lookup_one(harness.store, LOW_MARGIN) is None
    turn = await harness.store.get_turn("c1")
    assert turn is not None and turn.tier == "teacher" and turn.label is None
    assert turn.result == "error"
    calls = await harness.store.oracle_calls("c1")
    assert [(c.result, c.error) for c in calls] == [("error", SHUTDOWN)]


async def test_teacher_turns_a_stopped_process_left_are_closed_after_an_hour(
    harness: Harness,
) -> None:
    """A teacher-tier turn without a result (what a SIGKILL leaves) is closed `error` once it
    was observed over an hour ago, and counted; not sooner, and not while this process is
    still teaching it, though another process sharing the store closes that one."""
    now = utc_now()
    stopped = Turn("killed", "cheapest flight", "shell_exec", now - timedelta(hours=2))
    recent = replace(stopped, id="recent", at=now - timedelta(minutes=50))
    await harness.store.record_turns(
        [replace(t, flagged=True, tier="teacher") for t in (stopped, recent)]
    )
    harness.stub.reply(Reply(hang=True))
    long_ago = now - timedelta(hours=2)
    harness.learner.offer(
        Observation.of(LOW_MARGIN, "shell_exec", {"turn_id": "live"}, at=long_ago)
    )
    await asyncio.wait_for(harness.stub.arrived.wait(), 5.0)

    assert await harness.learner.close_abandoned() == 1
    results = {i: (await harness.store.get_turn(i)) for i in ("killed", "recent", "live")}
    assert {i: (t.tier, t.result) for i, t in results.items() if t is not None} == {
        "killed": ("teacher", "error"),
        "recent": ("teacher", None),
        "live": ("teacher", None),
    }
    assert harness.counter("teacher_abandoned") == 1
    assert harness.counter("oracle_decisions", tier="teacher", result="error") == 1
    assert await harness.learner.close_abandoned() == 0

    replica = Harness(harness.store, harness.stub)
    assert await replica.learner.close_abandoned() == 1
    live = await harness.store.get_turn("live")
    assert live is not None and live.result == "error"
    await replica.teacher.aclose()


async def test_close_leaves_nothing_running(
    sqlite_store: SqliteStore, anthropic_stub: Stub
) -> None:
    """After close() no learner task is pending, even with a teacher call in flight."""
    anthropic_stub.reply(Reply(hang=True))
    h = Harness(sqlite_store, anthropic_stub)
    await h.load_catalog()
    h.learner.start()
    h.learner.observe(LOW_MARGIN, "shell_exec")
    await asyncio.wait_for(anthropic_stub.arrived.wait(), 5.0)
    await h.learner.close(0.1)
    await h.teacher.aclose()
    # The stub's own server task for the hung request is not ours; every learner task is named.
    ours = [
        t.get_name()
        for t in asyncio.all_tasks()
        if not t.done() and t.get_name().startswith(("toolselect-learner", "teach-"))
    ]
    assert ours == []
    assert h.learner.depth == 0
    assert not h.learner.observe("late", "shell_exec")
    assert h.counter("observe_dropped", reason="closed") == 1


async def test_turns_never_taken_are_handed_back_at_close(
    sqlite_store: SqliteStore, anthropic_stub: Stub
) -> None:
    """Turns accepted while the worker never started (a catalog that never loaded) are handed
    back at close, in order and unlabelled, for the service to spool; none is counted dropped."""
    h = Harness(sqlite_store, anthropic_stub)
    h.learner.open()
    assert h.learner.observe("weather in Rome", "get_weather", turn_id="t1", outcome="ok")
    assert h.learner.observe("mail Bob", "send_email", turn_id="t2")
    left = await h.learner.close(0.1)
    await h.teacher.aclose()
    assert [(t.id, t.request, t.used_tool, t.outcome, t.label) for t in left] == [
        ("t1", "weather in Rome", "get_weather", "ok", None),
        ("t2", "mail Bob", "send_email", None, None),
    ]
    assert h.learner.depth == 0
    assert h.counter("observe_dropped", reason="shutdown") == 0


async def test_turns_waiting_for_the_teacher_are_bounded(
    sqlite_store: SqliteStore, anthropic_stub: Stub
) -> None:
    """While the teacher hangs, at most a queue's worth of escalations wait for it; the turns
    beyond end `limit_reached` at once (counted as the `backlog` budget) instead of piling up
    as tasks without end."""
    anthropic_stub.reply(Reply(hang=True))
    h = Harness(sqlite_store, anthropic_stub, queue_size=2)
    await h.load_catalog()
    h.learner.start()
    try:
        for i, city in enumerate(("Rome", "Oslo", "Lima", "Kyiv", "Pune")):
            assert h.learner.observe(f"run the backup script for {city}", "shell_exec",
                                     turn_id=f"b{i}")  # fmt: skip
            await asyncio.sleep(0.05)
        for _ in range(100):
            if h.counter("teacher_budget_spent", scope="backlog") == 3:
                break
            await asyncio.sleep(0.05)
        for _ in range(100):
            if len(anthropic_stub.received) == 2:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.1)
        assert len(anthropic_stub.received) == 2  # the two waiting, and no more, reach it
        assert h.counter("teacher_budget_spent", scope="backlog") == 3
        refused = [await h.store.get_turn(f"b{i}") for i in range(2, 5)]
        assert [t.result if t else None for t in refused] == ["limit_reached"] * 3
    finally:
        await h.learner.close(0.1)
        await h.teacher.aclose()


async def test_turns_drained_at_close_are_not_sent_to_the_teacher(harness: Harness) -> None:
    """Turns still queued when the learner closes are recorded (declined) without a paid call:
    a stopping service does not start calls it would cut short."""
    harness.stub.reply(teacher_answers("crypto_price"))
    harness.learner.observe(LOW_MARGIN, "shell_exec", turn_id="s1")
    await harness.learner.close(5.0)
    turn = await harness.store.get_turn("s1")
    assert turn is not None and (turn.tier, turn.result) == ("teacher", "declined")
    assert harness.stub.received == []


async def test_disagreement_on_a_turn_that_worked_escalates(harness: Harness) -> None:
    """The agent disagreed with a confident ranker but the turn worked: ask the teacher."""
    harness.stub.reply(teacher_answers("web_search"))
    harness.learner.observe(
        "send an email message to Marco", "web_search", turn_id="d1", outcome="ok"
    )
    assert await harness.learner.drain(30.0)
    turn = await harness.store.get_turn("d1")
    assert turn is not None
    assert (turn.flag_reason, turn.tier, turn.label) == ("disagreement", "teacher", "web_search")
