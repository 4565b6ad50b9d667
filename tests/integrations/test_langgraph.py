"""langgraph-bigtool's agent with toolselect as its tool retriever, driven by LangChain's fake
chat model against a real toolselect server: the model's `retrieve_tools` call is answered by
toolselect's ranking, made with the run's thread as the session, the tool it then calls is
reported with that retrieval's search id and session, and a stopped server reveals every tool."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from langgraph_bigtool import create_agent

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
from toolselect.integrations.langgraph import ToolselectRetriever

QUESTION = "Will it rain in Turin tomorrow?"


@pytest.fixture(autouse=True)
def bigtool_on_current_langgraph(monkeypatch: pytest.MonkeyPatch) -> None:
    """langgraph-bigtool 0.0.3 (the latest) routes each regular tool call through
    `ToolNode.inject_tool_args`, which langgraph-prebuilt 1.x no longer has: its agent fails at
    the first call of a retrieved tool. Stands in for it (no tool here takes injected
    arguments), so the tests run the rest of bigtool's graph as released."""
    if not hasattr(ToolNode, "inject_tool_args"):
        monkeypatch.setattr(
            ToolNode, "inject_tool_args", lambda self, call, state, store: call, raising=False
        )


REGISTRY: dict[str, BaseTool] = {
    "t-email": send_email,
    "t-weather": get_weather,
    "t-stock": stock_quote,
    "t-translate": translate_text,
}


def bigtool_agent(model: Any, retriever: ToolselectRetriever) -> Any:
    """bigtool's agent over the registry, retrieving through `retriever` both ways."""
    return create_agent(
        model,
        REGISTRY,
        retrieve_tools_function=retriever.retrieve_tools_function,
        retrieve_tools_coroutine=retriever.retrieve_tools_coroutine,
    )


def test_retrieval_ranks_the_registry_and_the_call_is_reported(server: LiveServer) -> None:
    model = scripted(("retrieve_tools", {"query": "rain forecast for a city"}), "get_weather")
    with Client(server.url) as ts:
        retriever = ToolselectRetriever(ts, REGISTRY, agent="bigtool", k=2)
        agent = bigtool_agent(model, retriever).compile()
        result = agent.invoke({"messages": [HumanMessage(QUESTION)]})
        turn_id = retriever.report(result["messages"], session_id="s-1")
    assert turn_id is not None
    before, after, _ = model.offered
    assert before == ["retrieve_tools"]
    assert after[0] == "retrieve_tools" and "get_weather" in after and len(after) == 3
    assert result["messages"][2].content.startswith("Available tools: ")
    stored = wait_for_turn(server, turn_id)
    [shown] = retriever._shown.values()
    assert (stored.request, stored.used_tool, stored.pack) == (QUESTION, "get_weather", "bigtool")
    assert (stored.search_id, stored.session_id, stored.outcome) == (shown.search_id, "s-1", "ok")
    assert shown.search_id is not None


def test_the_thread_is_the_session_of_the_ranking_and_the_report(server: LiveServer) -> None:
    """The retrieval ranks with the run's LangGraph `thread_id` as the session, and a report
    given no session stores the turn with that thread, so both name one conversation."""
    model = scripted(("retrieve_tools", {"query": "rain forecast for a city"}), "get_weather")
    transport = RecordingTransport()
    with Client(server.url, transport=transport) as ts:
        retriever = ToolselectRetriever(ts, REGISTRY, agent="bigtool-thread", k=2)
        agent = bigtool_agent(model, retriever).compile(checkpointer=InMemorySaver())
        config: RunnableConfig = {"configurable": {"thread_id": "thread-7"}}
        result = agent.invoke({"messages": [HumanMessage(QUESTION)]}, config)
        turn_id = retriever.report(result["messages"])
    assert [rank.get("session_id") for rank in transport.ranks] == ["thread-7"]
    assert turn_id is not None
    stored = wait_for_turn(server, turn_id)
    assert (stored.used_tool, stored.session_id) == ("get_weather", "thread-7")
    assert stored.search_id is not None


def test_a_report_given_the_thread_names_that_threads_retrieval(server: LiveServer) -> None:
    """Two threads retrieve with the same query: each run's report, given its thread, carries
    the search id of its own thread's ranking, not the latest one."""
    query = ("retrieve_tools", {"query": "rain forecast for a city"})
    with Client(server.url) as ts:
        retriever = ToolselectRetriever(ts, REGISTRY, agent="bigtool-threads", k=2)
        results = {}
        for thread in ("thread-a", "thread-b"):
            agent = create_agent(
                scripted(query, "get_weather"),
                REGISTRY,
                retrieve_tools_function=retriever.retrieve_tools_function,
            ).compile()
            config: RunnableConfig = {"configurable": {"thread_id": thread}}
            results[thread] = agent.invoke({"messages": [HumanMessage(QUESTION)]}, config)
        turn_id = retriever.report(results["thread-a"]["messages"], session_id="thread-a")
    assert turn_id is not None
    stored = wait_for_turn(server, turn_id)
    ranked = {thread: shown.search_id for (thread, _), shown in retriever._shown.items()}
    assert ranked["thread-a"] != ranked["thread-b"]
    assert (stored.session_id, stored.search_id) == ("thread-a", ranked["thread-a"])


def test_the_model_is_not_asked_for_the_config() -> None:
    """The retrieval functions take LangChain's injected `RunnableConfig`; the tool bigtool
    builds from them offers the model `query` alone, and a direct call needs no config."""
    with Client(f"http://127.0.0.1:{free_port()}", retries=0) as ts:
        retriever = ToolselectRetriever(ts, REGISTRY, agent="bigtool-schema")
        retrieve = StructuredTool.from_function(
            func=retriever.retrieve_tools_function, coroutine=retriever.retrieve_tools_coroutine
        )
        assert retriever.retrieve_tools_function("rain") == list(REGISTRY)  # degraded: all
    assert list(retrieve.args) == ["query"]
    parameters = convert_to_openai_tool(retrieve)["function"]["parameters"]
    assert list(parameters["properties"]) == ["query"] and parameters["required"] == ["query"]


async def test_the_coroutine_serves_an_async_run(server: LiveServer) -> None:
    model = scripted(("retrieve_tools", {"query": "stock price"}), "stock_quote")
    transport = RecordingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        retriever = ToolselectRetriever(ts, REGISTRY, agent="bigtool-async", k=1)
        agent = create_agent(
            model, REGISTRY, retrieve_tools_coroutine=retriever.retrieve_tools_coroutine
        ).compile()
        config: RunnableConfig = {"configurable": {"thread_id": "thread-async"}}
        result = await agent.ainvoke({"messages": [HumanMessage("price of ACME stock")]}, config)
        turn_id = retriever.report(result["messages"], session_id="chosen")
    assert model.offered[1] == ["retrieve_tools", "stock_quote"]
    assert [rank.get("session_id") for rank in transport.ranks] == ["thread-async"]
    assert turn_id is not None
    stored = await asyncio.to_thread(wait_for_turn, server, turn_id)
    assert stored.used_tool == "stock_quote" and stored.search_id is not None
    assert stored.session_id == "chosen"  # the caller's session wins over the thread


def test_toolselect_down_reveals_every_tool(caplog: pytest.LogCaptureFixture) -> None:
    model = scripted(("retrieve_tools", {"query": "rain"}), "get_weather")
    with Client(f"http://127.0.0.1:{free_port()}", retries=0) as ts:
        retriever = ToolselectRetriever(ts, REGISTRY, agent="bigtool-down")
        agent = create_agent(
            model, REGISTRY, retrieve_tools_function=retriever.retrieve_tools_function
        ).compile()
        with caplog.at_level(logging.WARNING, logger="toolselect"):
            result = agent.invoke({"messages": [HumanMessage(QUESTION)]})
            assert retriever.report(result["messages"]) is not None  # queued, never raises
    assert model.offered[1] == ["retrieve_tools", *(t.name for t in REGISTRY.values())]
    ours = [r for r in caplog.records if r.name == "toolselect.integrations"]
    assert [r.getMessage() for r in ours] == ["toolselect_narrow_degraded"]
