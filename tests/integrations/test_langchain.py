"""LangChain 1.x `create_agent` with `ToolselectMiddleware`, driven by LangChain's own
`GenericFakeChatModel` (taught to record the tools it is offered) against a real toolselect
server: the model is offered the narrowed tools, the tool it calls reaches the store as a turn
with the narrowing's search id, tool failures report `error`, and a stopped server offers
every tool."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse, ToolErrorMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import BaseTool, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver

from tests.integrations.langchain_fakes import (
    get_weather,
    scripted,
    send_email,
    stock_quote,
    translate_text,
)
from tests.integrations.test_conversation import RecordingTransport
from tests.live import LiveServer, wait_for_turn
from tests.services import free_port
from toolselect.client import AsyncClient, Client
from toolselect.integrations.langchain import METADATA_KEY, ToolselectMiddleware, turn_id_of
from toolselect.integrations.sessions import fit_session_id
from toolselect.turns import MAX_NAME_CHARS

QUESTION = "Will it rain in Turin tomorrow?"


@tool
def handoff(reason: str) -> str:
    """Hand the conversation over to a human operator."""
    return "handed off"


TOOLS: list[BaseTool] = [send_email, get_weather, stock_quote, translate_text, handoff]


def stored_turn(server: LiveServer, answer: dict[str, Any]) -> Any:
    human = next(m for m in answer["messages"] if isinstance(m, HumanMessage))
    turn_id = turn_id_of(human)
    assert turn_id is not None
    return wait_for_turn(server, turn_id)


def test_invoke_narrows_the_tools_and_reports_the_call(server: LiveServer) -> None:
    """The model is offered the narrowed tools in the agent's order; the call is stored with
    the ranking's search id and the thread as its session, which went to the ranking too."""
    model = scripted("get_weather")
    transport = RecordingTransport()
    with Client(server.url, transport=transport) as ts:
        middleware = ToolselectMiddleware(ts, agent="lc-weather", k=2, always=["handoff"])
        agent = create_agent(model, TOOLS, middleware=[middleware], checkpointer=InMemorySaver())
        answer = agent.invoke(
            {"messages": [{"role": "user", "content": QUESTION}]},
            {"configurable": {"thread_id": "thread-7"}},
        )
        stored = stored_turn(server, answer)
    first, _ = model.offered
    assert "get_weather" in first and "handoff" in first and len(first) == 3
    assert first == [t.name for t in TOOLS if t.name in first]  # the agent's order
    assert answer["messages"][-1].content == "It will rain tomorrow."
    calling = answer["messages"][1]
    search_id = calling.response_metadata[METADATA_KEY]["search_id"]
    assert search_id is not None
    assert (stored.request, stored.used_tool, stored.search_id) == (
        QUESTION,
        "get_weather",
        search_id,
    )
    assert (stored.pack, stored.outcome, stored.session_id) == ("lc-weather", "ok", "thread-7")
    assert transport.ranks  # one ranking per model call, each with the thread
    assert {rank.get("session_id") for rank in transport.ranks} == {"thread-7"}
    assert stored.shown_position is not None


async def test_ainvoke_with_the_async_client(server: LiveServer) -> None:
    model = scripted("get_weather", "send_email")
    async with AsyncClient(server.url) as ts:
        middleware = ToolselectMiddleware(ts, agent="lc-async", k=2)
        agent = create_agent(model, TOOLS, middleware=[middleware])
        answer = await agent.ainvoke(
            {"messages": [HumanMessage("Mail Ann whether it will rain in Turin tomorrow")]}
        )
    assert all(len(offered) == 2 for offered in model.offered)
    stored = await asyncio.to_thread(stored_turn, server, answer)
    assert stored.used_tools == ("get_weather", "send_email")
    first_call = answer["messages"][1]
    assert stored.search_id == first_call.response_metadata[METADATA_KEY]["search_id"]


def failing(error: Exception) -> BaseTool:
    @tool
    def get_weather(city: str) -> str:
        """Current weather and forecast for a city: temperature, rain, wind."""
        raise error

    return get_weather


def test_a_tool_exception_that_ends_the_run_reports_an_error(server: LiveServer) -> None:
    tools = [send_email, failing(RuntimeError("weather service down")), stock_quote]
    with Client(server.url) as ts:
        agent = create_agent(
            scripted("get_weather"), tools, middleware=[ToolselectMiddleware(ts, agent="lc-fail")]
        )
        human = HumanMessage(QUESTION, id="human-1")
        with pytest.raises(RuntimeError, match="weather service down"):
            agent.invoke({"messages": [human]})
        stored = stored_turn(server, {"messages": [human]})
    assert (stored.used_tool, stored.outcome) == ("get_weather", "error")
    assert stored.search_id is not None


async def test_a_tool_error_returned_to_the_model_reports_an_error(server: LiveServer) -> None:
    tools = [send_email, failing(ToolException("no such city")), stock_quote]
    returned = ToolErrorMiddleware(on_error=lambda exc, request: f"failed: {exc}")
    async with AsyncClient(server.url) as ts:
        agent = create_agent(
            scripted("get_weather"),
            tools,
            # Outermost first: toolselect sees the error the inner middleware turned into a
            # tool message, and reports the turn when the run ends.
            middleware=[ToolselectMiddleware(ts, agent="lc-error"), returned],
        )
        answer = await agent.ainvoke({"messages": [HumanMessage(QUESTION)]})
    assert answer["messages"][2].status == "error"
    stored = await asyncio.to_thread(stored_turn, server, answer)
    assert (stored.used_tool, stored.outcome) == ("get_weather", "error")


def test_toolselect_down_offers_every_tool_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = scripted()
    with Client(f"http://127.0.0.1:{free_port()}", retries=0) as ts:
        agent = create_agent(
            model, TOOLS, middleware=[ToolselectMiddleware(ts, agent="lc-down", k=1)]
        )
        with caplog.at_level(logging.WARNING, logger="toolselect"):
            answer = agent.invoke({"messages": [HumanMessage(QUESTION)]})
    assert answer["messages"][-1].content == "It will rain tomorrow."
    assert model.offered == [[t.name for t in TOOLS]]
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert lines == ["toolselect_narrow_degraded"]


def test_a_conversation_without_tools_is_left_alone(server: LiveServer) -> None:
    model = scripted()
    with Client(server.url) as ts:
        middleware = ToolselectMiddleware(ts, agent="lc-none")
        agent = create_agent(model, [], middleware=[middleware])
        answer = agent.invoke({"messages": [HumanMessage("hello")]})
        assert ts.observe_stats.pending + ts.observe_stats.sent == 0
    assert answer["messages"][-1].content == "It will rain tomorrow."
    assert "toolselect" not in answer["messages"][-1].response_metadata


async def test_a_forced_tool_is_offered(server: LiveServer) -> None:
    """`ModelRequest(tool_choice="send_email")` with k=1 on a weather question: the model is
    offered send_email beside the ranked tool (it was narrowed away while still forced)."""
    seen: list[ModelRequest[Any]] = []

    async def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
        seen.append(request)
        return ModelResponse(result=[AIMessage(content="ok")])

    async with AsyncClient(server.url) as ts:
        middleware = ToolselectMiddleware(ts, agent="lc-forced", k=1)
        for choice, expected in (("send_email", ["send_email", "get_weather"]),
                                 ("any", ["get_weather"])):  # fmt: skip
            request = ModelRequest(
                model=scripted(),
                messages=[HumanMessage(QUESTION)],
                tools=list(TOOLS),
                tool_choice=choice,
            )
            await middleware.awrap_model_call(request, handler)
            assert [t.name for t in seen[-1].tools if isinstance(t, BaseTool)] == expected
            assert seen[-1].tool_choice == choice


def test_a_thread_id_over_the_servers_limit_is_reported_as_its_stand_in(
    server: LiveServer,
) -> None:
    """A LangGraph `thread_id` over the server's limit is the turn's session as its stable short
    stand-in (sent whole, the server refused the turn and it was lost)."""
    thread = "org-3/project-8/" + "t" * MAX_NAME_CHARS
    with Client(server.url) as ts:
        middleware = ToolselectMiddleware(ts, agent="lc-long-thread", k=2)
        agent = create_agent(
            scripted("get_weather"), TOOLS, middleware=[middleware], checkpointer=InMemorySaver()
        )
        answer = agent.invoke(
            {"messages": [{"role": "user", "content": QUESTION}]},
            {"configurable": {"thread_id": thread}},
        )
        stored = stored_turn(server, answer)
    assert (stored.used_tool, stored.session_id) == ("get_weather", fit_session_id(thread))
