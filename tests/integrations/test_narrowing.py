"""The frameworks' shared core against a real toolselect server: narrowing keeps the ranked and
the `always` tools in the agent's order, an unchanged catalog is uploaded once per process, a
stopped server degrades to every tool within the timeout with one log line, and a report reaches
the store with the search id of the narrowing that showed the tool."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.live import LiveServer, wait_for_turn
from tests.services import WatchedTransport, free_port
from toolselect.client import AsyncClient, Client
from toolselect.integrations.narrowing import (
    Narrowed,
    ToolNarrower,
    ToolSpec,
    catalog_hash,
    compose_query,
)
from toolselect.integrations.sessions import fit_session_id
from toolselect.turns import MAX_NAME_CHARS

TOOLS = [
    ToolSpec("send_email", "Send an email message to a recipient with a subject and body."),
    ToolSpec(
        "get_weather",
        "Current weather and forecast for a city: temperature, rain, wind.",
        {"type": "object", "properties": {"city": {"type": "string"}}},
    ),
    ToolSpec("stock_quote", "Latest stock price quote for a ticker symbol on the market."),
    ToolSpec("translate_text", "Translate a text from one language into another."),
    ToolSpec("handoff", "Hand the conversation over to a human operator."),
]
NAMES = [t.name for t in TOOLS]
WEATHER = "Will it rain in Turin tomorrow?"


class CountingTransport(WatchedTransport):
    """The real transport, counting the requests by method and path."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str]] = []

    async def before(self, method: str, url: str, body: bytes | None) -> None:
        self.sent.append((method, url.split("/v1/", 1)[-1].split("?")[0]))

    def count(self, method: str, path: str) -> int:
        return self.sent.count((method, path))


def error_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_narrowing_keeps_the_best_and_the_always_tools_in_the_agents_order(
    server: LiveServer,
) -> None:
    async with AsyncClient(server.url) as ts:
        narrower = ToolNarrower(ts, agent="core-narrow", k=2, always=["handoff"])
        kept, search_id = await narrower.narrow("Will it rain in Turin tomorrow?", TOOLS)
        listed = {t.name for t in await ts.tools.list(pack="core-narrow")}
    assert search_id is not None
    assert "get_weather" in kept and "handoff" in kept
    assert len(kept) == 3  # k ranked tools + the always one
    assert kept == [n for n in NAMES if n in kept]  # the agent's order, not the ranking's
    assert listed == set(NAMES)  # the catalog went to the agent's pack


async def test_an_unchanged_catalog_is_uploaded_once_per_process(server: LiveServer) -> None:
    transport = CountingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        first = ToolNarrower(ts, agent="core-once", k=2)
        await first.narrow("weather in Rome", TOOLS)
        await first.narrow("send an email to Ann", list(reversed(TOOLS)))  # same content
        # A narrower built again (as a per-request middleware would be) knows it too.
        await ToolNarrower(ts, agent="core-once", k=2).narrow("stock price of ACME", TOOLS)
        assert transport.count("PUT", "tools") == 1
        assert transport.count("POST", "rank") == 3

        changed = [*TOOLS[:-1], ToolSpec("handoff", "Pass the chat to a person.")]
        assert await first.upload(changed)
        assert transport.count("PUT", "tools") == 2
        # Another agent's pack is its own catalog.
        await ToolNarrower(ts, agent="core-other", k=2).narrow("weather in Rome", TOOLS)
        assert transport.count("PUT", "tools") == 3


async def test_a_stopped_server_degrades_to_every_tool_within_the_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = LiveServer(tmp_path)  # stopped by the test
    async with AsyncClient(server.url) as ts:
        narrower = ToolNarrower(ts, agent="core-down", k=2, timeout_s=0.25)
        assert (await narrower.narrow("weather in Rome", TOOLS)).search_id is not None
        server.stop()
        with caplog.at_level(logging.INFO, logger="toolselect"):
            started = time.perf_counter()
            narrowed = await narrower.narrow("weather in Rome", TOOLS)
            waited = time.perf_counter() - started
    assert narrowed == Narrowed(NAMES, None)
    assert waited < 0.25 + 0.15
    [line] = error_lines(caplog)
    assert line.getMessage() == "toolselect_narrow_degraded"
    assert line.__dict__["kept"] == len(TOOLS)


async def test_a_slow_server_degrades_at_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    """A server that accepts the connection and never answers costs the turn `timeout_s`."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)
        writer.close()

    port = free_port()
    server = await asyncio.start_server(silent, "127.0.0.1", port)
    try:
        async with AsyncClient(f"http://127.0.0.1:{port}", retries=0) as ts:
            narrower = ToolNarrower(ts, agent="core-slow", timeout_s=0.2)
            with caplog.at_level(logging.WARNING, logger="toolselect"):
                started = time.perf_counter()
                narrowed = await narrower.narrow("weather in Rome", TOOLS)
                waited = time.perf_counter() - started
    finally:
        server.close()
    assert narrowed == Narrowed(NAMES, None)
    assert 0.2 <= waited < 0.35
    [line] = error_lines(caplog)
    assert "TimeoutError" in line.__dict__["error"]


async def test_an_unreachable_server_degrades_and_reports_nothing_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", retries=0) as ts:
        narrower = ToolNarrower(ts, agent="core-unreachable")
        with caplog.at_level(logging.WARNING, logger="toolselect"):
            narrowed = await narrower.narrow("weather in Rome", TOOLS)
            turn_id = narrower.report("weather in Rome", ["get_weather"], search_id=None)
    assert narrowed.tools == NAMES
    assert turn_id is not None  # queued; the client counts it failed, nothing raised
    assert next(r.getMessage() for r in error_lines(caplog)) == "toolselect_narrow_degraded"


async def test_a_report_reaches_the_store_with_its_search_id(server: LiveServer) -> None:
    question = "Will it rain in Turin tomorrow?"
    async with AsyncClient(server.url) as ts:
        narrower = ToolNarrower(ts, agent="core-report", k=2)
        _kept, search_id = await narrower.narrow(question, TOOLS)
        turn_id = narrower.report(
            question,
            ["get_weather", "send_email", "get_weather"],
            search_id=search_id,
            outcome="ok",
            session_id="chat-1",
        )
    assert turn_id is not None and search_id is not None
    stored = await asyncio.to_thread(wait_for_turn, server, turn_id)
    assert (stored.request, stored.used_tool, stored.used_tools) == (
        question,
        "get_weather",
        ("get_weather", "send_email"),
    )
    assert (stored.search_id, stored.pack, stored.agent_id) == (
        search_id,
        "core-report",
        "core-report",
    )
    assert (stored.outcome, stored.session_id) == ("ok", "chat-1")
    assert stored.shown_position is not None  # the server knew the tool was shown


async def test_a_turn_reports_the_narrowing_that_showed_its_first_tool(server: LiveServer) -> None:
    async with AsyncClient(server.url) as ts:
        turn = ToolNarrower(ts, agent="core-turn", k=1).turn("price of ACME stock, then mail it")
        first = await turn.narrow(TOOLS)
        # The next model call is offered other tools (the agent's own filtering, say).
        rest = [t for t in TOOLS if t.name != "stock_quote"]
        second = await turn.narrow(rest, context=["send the quote to Ann by email"])
        assert second.search_id is not None and second.search_id != first.search_id
        assert first.tools == ["stock_quote"]
        turn.called("stock_quote")
        turn.called("send_email", failed=True)
        turn_id = turn.finish()
        assert turn.finish() is None  # once
    assert turn_id == turn.turn_id
    stored = await asyncio.to_thread(wait_for_turn, server, turn_id)
    assert (stored.search_id, stored.outcome) == (first.search_id, "error")
    assert stored.used_tools == ("stock_quote", "send_email")


def test_the_blocking_client_serves_synchronous_hooks(server: LiveServer) -> None:
    with Client(server.url) as ts:
        narrower = ToolNarrower(ts, agent="core-sync", k=1, always=["handoff"])
        assert narrower.upload_sync(TOOLS)
        kept, search_id = narrower.narrow_sync("weather in Turin", TOOLS)
        turn_id = narrower.report("weather in Turin", ["get_weather"], search_id=search_id)
    assert kept == ["get_weather", "handoff"]
    assert turn_id is not None
    assert wait_for_turn(server, turn_id).search_id == search_id


async def test_the_blocking_client_serves_coroutines_too(server: LiveServer) -> None:
    with Client(server.url) as ts:
        narrower = ToolNarrower(ts, agent="core-hop", k=1)
        kept, search_id = await narrower.narrow("weather in Turin", TOOLS)
    assert kept == ["get_weather"] and search_id is not None


async def test_synchronous_narrowing_with_an_async_client_degrades(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    async with AsyncClient(server.url) as ts:
        narrower = ToolNarrower(ts, agent="core-mixed")
        with caplog.at_level(logging.WARNING, logger="toolselect"):
            assert narrower.narrow_sync("weather", TOOLS).tools == NAMES
    assert "needs a blocking" in error_lines(caplog)[0].__dict__["error"]


def test_catalog_hash_and_query() -> None:
    assert catalog_hash(TOOLS) == catalog_hash(list(reversed(TOOLS)))
    assert catalog_hash(TOOLS) != catalog_hash(TOOLS[:-1])
    described = [*TOOLS[:-1], ToolSpec("handoff", "another description")]
    assert catalog_hash(TOOLS) != catalog_hash(described)
    assert compose_query(" and Paris? ", ["weather in Rome", "it rains"], 40) == (
        "and Paris?\nit rains\nweather in Rome"
    )
    assert compose_query("and Paris?", ["x" * 50, "it rains"], 25) == "and Paris?\nit rains"
    assert compose_query("hi", ["earlier"], 0) == "hi"


def test_import_leaves_the_model_stack_out() -> None:
    code = (
        "import sys, toolselect.integrations.narrowing; "
        "print(sorted(m for m in ('numpy', 'onnxruntime', 'sklearn', 'toolselect.service')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_a_long_request_in_a_wide_script_is_narrowed_and_reported_not_refused(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A request of 3,000 CJK characters (9,000 bytes of UTF-8, over the server's 8 KiB) is cut
    to what the server takes, for the ranking and for the report, not sent whole and refused
    (which kept every tool, and lost the turn)."""
    request = "東京の明日の天気と気温を教えてください。" * 150
    async with AsyncClient(server.url) as ts:
        narrower = ToolNarrower(ts, agent="core-wide", k=2, timeout_s=5.0)
        kept, search_id = await narrower.narrow(request, TOOLS)
        turn_id = narrower.report(request, ["get_weather"], search_id=search_id, outcome="ok")
    assert search_id is not None, error_lines(caplog)
    assert len(kept) == 2
    assert turn_id is not None and ts.observe_stats.sent == 1
    stored = wait_for_turn(server, turn_id).request
    assert request.startswith(stored) and len(stored.encode()) > (8 << 10) - 3


async def test_a_session_id_over_the_servers_limit_keeps_the_ranking_and_the_turn(
    server: LiveServer,
) -> None:
    """A conversation id over the server's limit (one built from several ids) goes as a stable
    short stand-in, to the ranking and with the turn (sent whole, the ranking was refused and
    degraded, and the turn was counted invalid while `report` returned its id)."""
    long_id = "tenant-42/user-7/" + "c" * MAX_NAME_CHARS
    async with AsyncClient(server.url) as ts:
        narrower = ToolNarrower(ts, agent="core-long-session", k=1, timeout_s=5.0)
        turn = narrower.turn(WEATHER, session_id=long_id)
        narrowed = await turn.narrow(TOOLS)
        turn.called("get_weather")
        turn_id = turn.finish()
    assert narrowed.search_id is not None and narrowed.tools == ["get_weather"]
    assert turn_id is not None and ts.observe_stats.invalid == 0
    stored = await asyncio.to_thread(wait_for_turn, server, turn_id)
    assert stored.session_id == fit_session_id(long_id)


def test_a_long_session_id_maps_to_one_stable_stand_in_within_the_limit() -> None:
    """The stand-in keeps the id's start, fits the server's limit, is the same for the same id
    and differs for ids that differ only past the limit; an id the server takes is unchanged."""
    start = "tenant-42/user-7/"
    one, two = start + "c" * MAX_NAME_CHARS + "1", start + "c" * MAX_NAME_CHARS + "2"
    mapped = fit_session_id(one)
    assert mapped is not None and len(mapped) == MAX_NAME_CHARS and mapped.startswith(start)
    assert fit_session_id(one) == mapped != fit_session_id(two)
    assert fit_session_id("x" * MAX_NAME_CHARS) == "x" * MAX_NAME_CHARS
    assert fit_session_id(None) is None
