"""Client and AsyncClient against a real toolselect server on a socket."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from pathlib import Path

import pytest

from tests.client.conftest import API_KEY
from tests.client.test_failures import HeldSleep
from tests.live import LiveServer, live_server, wait_for_turn
from tests.services import WatchedTransport
from toolselect.api import models as m
from toolselect.client import ApiError, AsyncClient, Client, Unreachable
from toolselect.errors import InvalidInput

WEATHER = "what's the weather in Turin tomorrow, rain or wind?"


async def test_async_rank_puts_the_fitting_tool_first(server: LiveServer) -> None:
    """`AsyncClient.rank` answers the server's ranking as a `RankResponse`, best first."""
    async with AsyncClient(server.url) as ts:
        ranking = await ts.rank(WEATHER, k=3)
    assert isinstance(ranking, m.RankResponse)
    assert ranking.results[0].tool == "get_weather"
    assert len(ranking.results) == 3
    scores = [r.score for r in ranking.results]
    assert scores == sorted(scores, reverse=True)


def test_rank_without_k_takes_the_servers_default(tmp_path: Path) -> None:
    """A rank that names no k sends none: a server whose `TOOLSELECT_MAX_K` is 3 answers 3
    tools (the client sent 5 before, and that server refused it)."""
    for server in live_server(tmp_path, max_k=3):
        with Client(server.url) as ts:
            assert len(ts.rank(WEATHER).results) == 3
            with pytest.raises(ApiError, match=r"expected k in 1\.\.3"):
                ts.rank(WEATHER, k=4)


def test_sync_rank_restricted_to_names(server: LiveServer) -> None:
    """The blocking client passes `tools` through: only the named tools come back."""
    with Client(server.url) as ts:
        ranking = ts.rank(WEATHER, k=5, tools=["web_search", "fs_read"])
    assert {r.tool for r in ranking.results} == {"web_search", "fs_read"}


def test_catalog_put_list_get_delete(server: LiveServer) -> None:
    """`tools.put/list/get/delete` round-trip a tool through the server's catalog."""
    tool = {
        "name": "book_flight",
        "description": "Book a flight between two airports on a date.",
        "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}},
    }
    with Client(server.url) as ts:
        assert ts.tools.put([tool], pack="travel") == m.UpsertResponse(upserted=1, unchanged=0)
        assert [t.name for t in ts.tools.list(pack="travel")] == ["book_flight"]
        got = ts.tools.get("book_flight")
        assert got.packs == ["travel"]
        assert got.input_schema == tool["input_schema"]
        assert ts.rank("book a flight to Lisbon", k=1).results[0].tool == "book_flight"
        assert ts.tools.delete("book_flight") is True
        with pytest.raises(ApiError) as caught:
            ts.tools.get("book_flight")
    assert (caught.value.status, caught.value.code) == (404, "not_found")


def test_openai_format_tools_are_sent_as_a_list(server: LiveServer) -> None:
    """OpenAI function tools go up as the list body the server accepts for that format."""
    tool = {
        "type": "function",
        "function": {"name": "roll_dice", "description": "Roll dice for a board game."},
    }
    with Client(server.url) as ts:
        assert ts.tools.put([tool]).upserted == 1
        assert ts.tools.get("roll_dice").description == "Roll dice for a board game."


async def test_label_then_undo(server: LiveServer) -> None:
    """`label` stores a `feedback` exemplar the tool then lists, and `delete_exemplar` undoes it."""
    async with AsyncClient(server.url) as ts:
        saved = await ts.label("quanto costa il bitcoin adesso?", "stock_quote")
        assert saved.exemplar is not None
        assert saved.exemplar.tier == "feedback"
        listed = await ts.tools.exemplars("stock_quote")
        assert [e.id for e in listed] == [saved.exemplar.id]
        assert await ts.delete_exemplar(saved.exemplar.id) is True
        assert await ts.tools.exemplars("stock_quote") == []


def test_select_answers_candidate_ids(server: LiveServer) -> None:
    """`select` speaks PromptKit's payload and answers only candidate IDs, at most `K`."""
    query = m.PromptKitQuery(Text="send the report to Marco by email", K=1)
    candidates = [
        m.PromptKitCandidate(ID="send_email", Name="send_email", Description="Send an email"),
        m.PromptKitCandidate(ID="fs_read", Name="fs_read", Description="Read a local file"),
    ]
    with Client(server.url) as ts:
        answer = ts.select(query, candidates)
    assert answer.selected == ["send_email"]


async def test_analytics_and_learning(server: LiveServer) -> None:
    """`analyses` lists names, `analytics` answers columns and rows, `learning` the fit."""
    async with AsyncClient(server.url) as ts:
        names = await ts.analyses()
        drift = await ts.analytics("drift")
        fit = await ts.learning()
        with pytest.raises(InvalidInput):
            await ts.analytics("learning")
    assert "drift" in names and "learning" in names
    assert drift.columns == ["day", "turns", "flagged_rate", "escalation_rate"]
    assert isinstance(fit, m.LearningFit)


async def test_server_validation_error_carries_code_and_field(server: LiveServer) -> None:
    """A request the server refuses raises `ApiError` with its status, code, message and field."""
    async with AsyncClient(server.url) as ts:
        with pytest.raises(ApiError) as caught:
            await ts.rank(WEATHER, k=0)
    error = caught.value
    assert (error.status, error.code, error.field) == (422, "invalid_request", "k")
    assert "got 0" in error.message


async def test_local_validation_names_the_field(server: LiveServer) -> None:
    """A request that breaks the shared model is refused before sending, as `InvalidInput`."""
    async with AsyncClient(server.url) as ts:
        with pytest.raises(InvalidInput) as caught:
            await ts.rank(WEATHER, k="three")  # type: ignore[arg-type]
    assert caught.value.field == "k"


def test_missing_api_key_is_a_clear_401(keyed_server: LiveServer) -> None:
    """Without the key the server's 401 surfaces as `ApiError` saying what it expects."""
    with Client(keyed_server.url, retries=0) as ts, pytest.raises(ApiError) as caught:
        ts.rank(WEATHER)
    assert (caught.value.status, caught.value.code) == (401, "unauthorized")
    assert "Authorization: Bearer" in str(caught.value)


def test_wrong_api_key_is_refused_and_right_one_accepted(keyed_server: LiveServer) -> None:
    """A wrong key is refused with 401; the configured key is sent as a bearer token."""
    with Client(keyed_server.url, api_key="wrong") as ts, pytest.raises(ApiError) as caught:
        ts.rank(WEATHER)
    assert caught.value.status == 401
    with Client(keyed_server.url, api_key=API_KEY) as ts:
        assert ts.rank(WEATHER, k=1).results[0].tool == "get_weather"


def test_observe_is_flushed_on_close(server: LiveServer) -> None:
    """Turns buffered with a long send interval reach the server when the client closes."""
    ids = [f"t-flush-{i}" for i in range(3)]
    with Client(server.url, observe_interval_s=3600) as ts:
        for turn_id in ids:
            ts.observe("what's the bitcoin price?", "shell_exec", turn_id=turn_id, pack="assistant")
        assert ts.observe_stats.sent == 0
    assert ts.observe_stats.sent == 3
    assert ts.observe_stats.pending == 0
    stored = wait_for_turn(server, ids[-1])
    assert (stored.request, stored.used_tool, stored.pack) == (
        "what's the bitcoin price?",
        "shell_exec",
        "assistant",
    )


async def test_observe_sends_in_the_background(server: LiveServer) -> None:
    """A full batch is sent without waiting for `close`, and the client assigns turn ids."""
    async with AsyncClient(server.url, observe_batch=2, observe_interval_s=3600) as ts:
        ts.observe("translate this to German", "translate_text")
        ts.observe("translate this to French", "translate_text")
        for _ in range(100):
            if ts.observe_stats.sent == 2:
                break
            await asyncio.sleep(0.05)
        assert ts.observe_stats.sent == 2


class HeldBatches(WatchedTransport):
    """The real transport, but each observe batch waits for `release` (a server slow to answer)
    after setting `arrived`; thread events, as a blocking client sends from its own thread."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = threading.Event()
        self.release = threading.Event()

    async def before(self, method: str, url: str, body: bytes | None) -> None:
        if url.endswith("/v1/observe/batch"):
            self.arrived.set()
            await asyncio.to_thread(self.release.wait)


async def test_a_batch_on_its_way_is_still_pending(server: LiveServer) -> None:
    """The turns of a batch the server has not answered yet are `pending`, with those buffered
    behind it: `pending` read 0 once a batch left the buffer, though none of its turns had an
    outcome, so a host waiting for it to exit left them behind."""
    transport = HeldBatches()
    ts = AsyncClient(server.url, transport=transport, observe_batch=2, observe_interval_s=3600)
    try:
        ts.observe(WEATHER, "get_weather", turn_id="held-1")
        ts.observe(WEATHER, "get_weather", turn_id="held-2")
        await asyncio.to_thread(transport.arrived.wait)
        ts.observe(WEATHER, "get_weather", turn_id="held-3")
        assert (ts.observe_stats.sent, ts.observe_stats.pending) == (0, 3)
    finally:
        transport.release.set()  # a waiting thread would hold the test process at exit
        await ts.close()
    assert (ts.observe_stats.sent, ts.observe_stats.pending) == (3, 0)
    assert wait_for_turn(server, "held-2").request == WEATHER


class DroppedOnce(WatchedTransport):
    """The real transport, but the first observe batch's connection drops before an answer."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = False

    async def before(self, method: str, url: str, body: bytes | None) -> None:
        if url.endswith("/v1/observe/batch") and not self.dropped:
            self.dropped = True
            raise Unreachable(f"{method} {url}: the connection dropped")


async def test_a_batch_waiting_out_a_retry_is_still_pending(server: LiveServer) -> None:
    """A batch whose attempt failed is `pending` while the client waits to try it again, and
    sent (none pending) once it goes."""
    sleep = HeldSleep()
    async with AsyncClient(
        server.url, transport=DroppedOnce(), sleep=sleep, observe_batch=2, observe_interval_s=3600
    ) as ts:
        ts.observe(WEATHER, "get_weather")
        ts.observe(WEATHER, "get_weather")
        await sleep.started.wait()
        waiting = ts.observe_stats
        sleep.release.set()
    assert (waiting.sent, waiting.failed, waiting.pending) == (0, 0, 2)
    stats = ts.observe_stats
    assert (stats.sent, stats.failed, stats.pending) == (2, 0, 0)


def test_the_blocking_client_counts_pending_turns_as_the_async_one(server: LiveServer) -> None:
    """`Client.observe_stats` counts the batch on its way, and a turn as soon as `observe`
    returns (it hands the turn to its loop thread, where it was in no count until buffered)."""
    transport = HeldBatches()
    ts = Client(server.url, transport=transport, observe_batch=2, observe_interval_s=3600)
    try:
        ts.observe(WEATHER, "get_weather")
        ts.observe(WEATHER, "get_weather")
        transport.arrived.wait()
        in_flight = ts.observe_stats
        ts.observe(WEATHER, "get_weather")
        behind = ts.observe_stats
    finally:
        transport.release.set()
        ts.close()
    assert (in_flight.sent, in_flight.pending) == (0, 2)
    assert (behind.sent, behind.pending) == (0, 3)
    assert (ts.observe_stats.sent, ts.observe_stats.pending) == (3, 0)


class HeldTransport(WatchedTransport):
    """The real transport, but the first observe batch gets no answer (a server slow to
    answer) until the loop sending it ends."""

    def __init__(self) -> None:
        super().__init__()
        self.held = asyncio.Event()  # awaited on the first loop only

    async def before(self, method: str, url: str, body: bytes | None) -> None:
        if url.endswith("/v1/observe/batch") and not self.held.is_set():
            self.held.set()
            await asyncio.Event().wait()  # cancelled when `asyncio.run` ends


def test_one_async_client_serves_one_asyncio_run_after_another(server: LiveServer) -> None:
    """A host running each job in its own `asyncio.run` can keep one `AsyncClient`: every job's
    calls are answered; a batch whose loop ended mid-send waits in the buffer and goes with the
    next job, though it only ranks; `close` works from a third loop; no session, connector or
    socket is left unclosed."""
    transport = HeldTransport()
    ts = AsyncClient(server.url, transport=transport, observe_batch=1, observe_interval_s=3600)

    async def first() -> None:
        assert (await ts.rank(WEATHER, k=1)).results[0].tool == "get_weather"
        ts.observe(WEATHER, "get_weather", turn_id="loop-1", outcome="ok")
        await transport.held.wait()  # the batch is on its way when the loop ends

    async def second() -> None:
        assert (await ts.rank(WEATHER, k=1)).results[0].tool == "get_weather"
        for _ in range(500):
            if ts.observe_stats.sent == 1:
                break
            await asyncio.sleep(0.01)

    async def third() -> None:
        ts.observe(WEATHER, "get_weather", turn_id="loop-3", outcome="ok")
        await ts.close()

    gc.collect()  # what earlier tests left unclosed is theirs: collected before the count
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        asyncio.run(first())
        assert (ts.observe_stats.sent, ts.observe_stats.pending) == (0, 1)
        asyncio.run(second())
        assert (ts.observe_stats.sent, ts.observe_stats.pending) == (1, 0)
        asyncio.run(third())
        gc.collect()
    stats = ts.observe_stats
    assert (stats.sent, stats.failed, stats.pending) == (2, 0, 0)
    assert wait_for_turn(server, "loop-1").request == WEATHER
    assert wait_for_turn(server, "loop-3").request == WEATHER
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []
