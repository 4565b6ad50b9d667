"""OpenAI Responses tool search backed by toolselect, through the real `openai` SDK against a
local Responses API stub that searches (client-executed), calls what it loaded, then answers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import pytest_asyncio

from tests.client.conftest import Served
from tests.integrations.test_anthropic import CATALOG, QUESTION
from tests.integrations.test_narrowing import CountingTransport
from tests.live import LiveServer, wait_for_turn
from tests.services import free_port
from tests.stubs import (
    Reply,
    Responder,
    Stub,
    openai_response,
    openai_with_tool_search,
    start_stub,
)
from toolselect.client import AsyncClient
from toolselect.integrations.openai import ToolSearch, Turn


@pytest_asyncio.fixture(loop_scope="function")
async def responses_stub() -> AsyncIterator[Stub]:
    """A local stand-in for `POST /v1/responses`."""
    async for stub in start_stub("/v1/responses"):
        yield stub


async def converse(
    stub: Stub, search: ToolSearch, question: str, *, outcome: str | None = None
) -> Turn:
    """The host loop: tool searches answered by toolselect, functions run locally (how they
    went, when the host knows, is the turn's `outcome`)."""
    client = openai.AsyncOpenAI(api_key="test-key", base_url=f"{stub.url}/v1", max_retries=0)
    items: list[Any] = [{"role": "user", "content": question}]
    with search.turn(question) as turn:
        for _ in range(5):
            response = await client.responses.create(
                model="gpt-5.4", tools=search.tools(), input=items
            )
            outputs = await turn.answer(response)
            calls = search.tool_calls(response)
            if not outputs and not calls:
                break
            items += [item.model_dump(exclude_none=True) for item in response.output]
            items += outputs
            items += [
                {"type": "function_call_output", "call_id": c.call_id, "output": "ok"}
                for c in calls
            ]
        turn.outcome = outcome
    return turn


async def test_tool_search_loads_ranked_functions_and_the_turn_is_observed(
    server: LiveServer, responses_stub: Stub
) -> None:
    """The model gets deferred functions and a client `tool_search`; its search is answered
    with the definitions toolselect ranks first, and the function it calls is stored."""
    responses_stub.responder = openai_with_tool_search("rain forecast for a city")
    async with AsyncClient(server.url) as ts:
        search = ToolSearch(ts, CATALOG, k=2, pack="openai")
        uploaded = await search.upload()
        assert uploaded is not False and uploaded.upserted == 3
        turn = await converse(responses_stub, search, QUESTION)
    assert turn.used_tool == "get_weather"

    first, second, _ = (r.body for r in responses_stub.received)
    assert first["tools"][0] == {
        "type": "tool_search",
        "execution": "client",
        "description": first["tools"][0]["description"],
        "parameters": first["tools"][0]["parameters"],
    }
    assert all(t["defer_loading"] is True for t in first["tools"][1:])
    assert [t["name"] for t in first["tools"][1:]] == [t["name"] for t in CATALOG]

    output = second["input"][-1]
    assert (output["type"], output["call_id"], output["execution"]) == (
        "tool_search_output",
        "call_search_1",
        "client",
    )
    assert [t["name"] for t in output["tools"]] == ["get_weather", "send_email"]
    assert output["tools"][0]["parameters"] == CATALOG[0]["input_schema"]

    stored = wait_for_turn(server, turn.turn_id)
    assert (stored.request, stored.used_tool, stored.pack) == (QUESTION, "get_weather", "openai")


async def test_toolselect_down_loads_the_whole_catalog(
    responses_stub: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    """With toolselect unreachable every function is loaded, one line is logged, the turn ends."""
    responses_stub.responder = openai_with_tool_search("rain tomorrow")
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", retries=0) as ts:
        search = ToolSearch(ts, CATALOG)
        with caplog.at_level(logging.WARNING, logger="toolselect.integrations"):
            turn = await converse(responses_stub, search, QUESTION)
    loaded = responses_stub.received[1].body["input"][-1]["tools"]
    assert [t["name"] for t in loaded] == [t["name"] for t in CATALOG]
    assert turn.used_tool == "get_weather"
    assert turn.search_id is None
    mine = [r.getMessage() for r in caplog.records if r.name == "toolselect.integrations"]
    assert mine == ["toolselect_search_degraded"]


def test_chat_completions_tools_are_flattened() -> None:
    """A Chat Completions-style `{"type": "function", "function": {...}}` is accepted."""
    nested = {"type": "function", "function": {"name": "roll", "description": "Roll dice."}}
    search = ToolSearch(AsyncClient("http://127.0.0.1:1"), [nested])
    assert search.tools()[1] == {
        "type": "function",
        "name": "roll",
        "description": "Roll dice.",
        "parameters": {"type": "object", "properties": {}},
        "strict": False,
        "defer_loading": True,
    }


def model_searching(query: str, k: int, picks: list[int | str]) -> Responder:
    """Plays a Responses model: one tool search (`query`, `k`), then `picks` called at once
    (an int is a place among the loaded functions, a str a function's name), then an answer."""

    def respond(body: Any) -> Reply:
        last = body["input"][-1]
        if last.get("type") == "tool_search_output":
            loaded = [t["name"] for t in last["tools"]]
            calls = [
                {"type": "function_call", "id": f"fc_{i}", "call_id": f"call_fn_{i}",
                 "name": loaded[pick] if isinstance(pick, int) else pick, "arguments": "{}",
                 "status": "completed"}
                for i, pick in enumerate(picks)
            ]  # fmt: skip
            return Reply(body=openai_response(calls))
        if last.get("type") == "function_call_output":
            text = {"type": "output_text", "text": "Done.", "annotations": []}
            message = {"type": "message", "id": "msg_1", "role": "assistant",
                       "status": "completed", "content": [text]}  # fmt: skip
            return Reply(body=openai_response([message]))
        search = {"type": "tool_search_call", "id": "tsc_1", "call_id": "call_search_1",
                  "execution": "client", "status": "completed",
                  "arguments": {"query": query, "k": k}}  # fmt: skip
        return Reply(body=openai_response([search]))

    return respond


async def test_the_turn_reports_its_search_id_and_every_function_called(
    served: Served, responses_stub: Stub
) -> None:
    """The model calls the second loaded function, then the first: the stored turn has the
    search's id, the first call's place, both functions in order; `ok` labels the request."""
    responses_stub.responder = model_searching("rain forecast for a city", 2, [1, 0])
    async with AsyncClient(served.url) as ts:
        search = ToolSearch(ts, CATALOG, pack="openai")
        await search.upload()
        turn = await converse(responses_stub, search, QUESTION, outcome="ok")
    [found] = turn.searches
    assert found.search_id is not None and turn.search_id == found.search_id
    stored = await served.turn(turn.turn_id)
    assert (stored.search_id, stored.search_status) == (found.search_id, "shown")
    assert (stored.shown_position, stored.shown_k) == (2, 2)
    assert stored.used_tools == (found.tools[1], found.tools[0])
    exemplars = await served.service.catalog.exemplars_of(found.tools[1])
    assert [(e.query, e.tier) for e in exemplars] == [(QUESTION, "usage")]


async def test_a_function_the_model_was_not_loaded_is_reported_so(
    served: Served, responses_stub: Stub
) -> None:
    """A function outside what the search loaded is `not_shown` on the stored turn."""
    responses_stub.responder = model_searching("rain forecast for a city", 1, ["send_email"])
    async with AsyncClient(served.url) as ts:
        search = ToolSearch(ts, CATALOG, pack="openai")
        await search.upload()
        turn = await converse(responses_stub, search, QUESTION, outcome="ok")
    assert turn.searches[0].tools == ["get_weather"]
    stored = await served.turn(turn.turn_id)
    assert (stored.search_status, stored.shown_k, stored.used_tool) == (
        "not_shown",
        1,
        "send_email",
    )


async def test_an_upload_with_toolselect_down_degrades_and_the_search_loads_the_catalog(
    responses_stub: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    """`upload()` with toolselect unreachable logs one line and answers False (it raised
    `Unreachable`); the turn's tool search then loads every function."""
    responses_stub.responder = openai_with_tool_search("rain tomorrow")
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", retries=0) as ts:
        search = ToolSearch(ts, CATALOG)
        with caplog.at_level(logging.WARNING, logger="toolselect.integrations"):
            uploaded = await search.upload()
            turn = await converse(responses_stub, search, QUESTION)
    assert uploaded is False
    loaded = responses_stub.received[1].body["input"][-1]["tools"]
    assert [t["name"] for t in loaded] == [t["name"] for t in CATALOG]
    assert turn.used_tool == "get_weather"
    mine = [r.getMessage() for r in caplog.records if r.name == "toolselect.integrations"]
    assert mine == ["toolselect_upload_failed", "toolselect_search_degraded"]


async def test_a_catalog_over_the_body_limit_is_uploaded_in_several_puts(
    server: LiveServer,
) -> None:
    """601 functions of about 2.2 KB (1.3 MB, over the server's 1 MiB body limit) go in several
    PUTs, each taken (one PUT was refused whole, and no function of the catalog was stored)."""
    catalog = [
        {"type": "function", "name": f"op_{i:03d}", "description": f"Operation {i}. " + "w " * 1080}
        for i in range(601)
    ]
    transport = CountingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        search = ToolSearch(ts, catalog, pack="openai-big")
        uploaded = await search.upload()
        listed = await ts.tools.list(pack="openai-big")
    assert uploaded is not False and uploaded.upserted == 601
    assert len(listed) == 601
    assert transport.count("PUT", "tools") == 2
