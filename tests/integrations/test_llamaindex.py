"""LlamaIndex's `FunctionAgent` with toolselect as its `tool_retriever`, driven by LlamaIndex's
own `MockFunctionCallingLLM` against a real toolselect server: the model is offered the
narrowed tools, the tool it calls is reported with the run's narrowing id, a conversation's
retriever ranks and reports with its session, a failing tool reports `error`, and a stopped
server offers every tool."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms import MockFunctionCallingLLM

from tests.integrations.test_conversation import RecordingTransport
from tests.live import LiveServer, wait_for_turn
from tests.services import free_port
from toolselect.client import AsyncClient, Client
from toolselect.integrations.llamaindex import ToolselectToolRetriever

QUESTION = "Will it rain in Turin tomorrow?"


def get_weather(city: str) -> str:
    """Current weather and forecast for a city: temperature, rain, wind."""
    return f"Rain in {city} tomorrow."


def send_email(to: str, subject: str) -> str:
    """Send an email message to a recipient with a subject and body."""
    return "sent"


def stock_quote(ticker: str) -> str:
    """Latest stock price quote for a ticker symbol on the market."""
    return "42.0"


def translate_text(text: str, language: str) -> str:
    """Translate a text from one language into another."""
    return text


def handoff(reason: str) -> str:
    """Hand the conversation over to a human operator."""
    return "handed off"


TOOLS: list[Callable[..., str]] = [send_email, get_weather, stock_quote, translate_text, handoff]
NAMES = [t.__name__ for t in TOOLS]


class Model:
    """A `MockFunctionCallingLLM` that calls `tool` once (when offered), then answers; it
    records the tools each call was offered."""

    def __init__(self, tool: str = "get_weather", **args: Any) -> None:
        self.tool = tool
        self.args = args or {"city": "Turin"}
        self.offered: list[list[str]] = []
        self.llm = MockFunctionCallingLLM(response_generator=self.respond)

    def respond(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        offered = [t.metadata.name for t in kwargs.get("tools") or []]
        self.offered.append(offered)
        if any(m.role == MessageRole.TOOL for m in messages) or self.tool not in offered:
            return ChatMessage(role=MessageRole.ASSISTANT, content="It will rain tomorrow.")
        call = ToolCallBlock(tool_call_id="call_1", tool_name=self.tool, tool_kwargs=self.args)
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])


async def test_the_agent_is_offered_the_narrowed_tools_and_the_call_is_reported(
    server: LiveServer,
) -> None:
    model = Model()
    async with AsyncClient(server.url) as ts:
        retriever = ToolselectToolRetriever(ts, TOOLS, agent="li-weather", k=2, always=["handoff"])
        agent = FunctionAgent(tool_retriever=retriever, llm=model.llm)
        output = await agent.run(user_msg=QUESTION)
        shown = list(retriever._runs[None, QUESTION])
        turn_id = retriever.report(output, QUESTION, session_id="chat-3")
    assert str(output) == "It will rain tomorrow."
    first, _ = model.offered
    assert "get_weather" in first and "handoff" in first and len(first) == 3
    assert first == [n for n in NAMES if n in first]
    assert turn_id is not None
    stored = await asyncio.to_thread(wait_for_turn, server, turn_id)
    assert (stored.request, stored.used_tool, stored.pack) == (
        QUESTION,
        "get_weather",
        "li-weather",
    )
    assert (stored.search_id, stored.outcome, stored.session_id) == (
        shown[0].search_id,
        "ok",
        "chat-3",
    )
    assert stored.search_id is not None and stored.shown_position is not None


async def test_a_conversations_retriever_ranks_and_reports_with_its_session(
    server: LiveServer,
) -> None:
    """`for_session` gives one conversation its retriever: every narrowing of its runs is
    ranked with the session, and its report stores the turn with it, with the search id of
    that conversation's ranking though another conversation asked the same."""
    transport = RecordingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        retriever = ToolselectToolRetriever(ts, TOOLS, agent="li-session", k=2)
        outputs = {}
        for session in ("chat-3", "chat-4"):
            agent = FunctionAgent(tool_retriever=retriever.for_session(session), llm=Model().llm)
            outputs[session] = await agent.run(user_msg=QUESTION)
        shown = {session: list(retriever._runs[session, QUESTION]) for session in outputs}
        turn_id = retriever.for_session("chat-3").report(outputs["chat-3"], QUESTION)
        # The shared retriever, told the session, finds that conversation's rankings too.
        other_id = retriever.report(outputs["chat-4"], QUESTION, session_id="chat-4")
    # Two model calls a run (the one that calls the tool, the one that answers).
    sessions = [rank.get("session_id") for rank in transport.ranks]
    assert sessions == ["chat-3", "chat-3", "chat-4", "chat-4"]
    assert turn_id is not None
    stored = await asyncio.to_thread(wait_for_turn, server, turn_id)
    assert (stored.used_tool, stored.session_id) == ("get_weather", "chat-3")
    assert stored.search_id == shown["chat-3"][0].search_id != shown["chat-4"][0].search_id
    assert other_id is not None
    other = await asyncio.to_thread(wait_for_turn, server, other_id)
    assert (other.session_id, other.search_id) == ("chat-4", shown["chat-4"][0].search_id)


async def test_a_failing_tool_reports_an_error(server: LiveServer) -> None:
    def get_weather(city: str) -> str:
        """Current weather and forecast for a city: temperature, rain, wind."""
        raise RuntimeError("weather service down")

    model = Model()
    async with AsyncClient(server.url) as ts:
        retriever = ToolselectToolRetriever(ts, [send_email, get_weather], agent="li-fail", k=1)
        output = await FunctionAgent(tool_retriever=retriever, llm=model.llm).run(QUESTION)
        turn_id = retriever.report(output, QUESTION)
    assert turn_id is not None
    stored = await asyncio.to_thread(wait_for_turn, server, turn_id)
    assert (stored.used_tool, stored.outcome) == ("get_weather", "error")


async def test_toolselect_down_offers_every_tool(caplog: pytest.LogCaptureFixture) -> None:
    model = Model()
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", retries=0) as ts:
        retriever = ToolselectToolRetriever(ts, TOOLS, agent="li-down", k=1)
        with caplog.at_level(logging.WARNING, logger="toolselect.integrations"):
            output = await FunctionAgent(tool_retriever=retriever, llm=model.llm).run(QUESTION)
            assert retriever.report(output, QUESTION) is not None  # queued, never raises
    assert str(output) == "It will rain tomorrow."
    assert model.offered[0] == NAMES
    ours = [r for r in caplog.records if r.name == "toolselect.integrations"]
    # One line per model call: the call that picked the tool, and the one that answered.
    assert [r.getMessage() for r in ours] == ["toolselect_narrow_degraded"] * 2


def test_the_synchronous_retriever(server: LiveServer) -> None:
    """The blocking retriever ranks too, with the session it was made with."""
    transport = RecordingTransport()
    with Client(server.url, transport=transport) as ts:
        retriever = ToolselectToolRetriever(ts, TOOLS, agent="li-sync", k=1, session_id="chat-9")
        assert [t.metadata.name for t in retriever.retrieve(QUESTION)] == ["get_weather"]
        assert [t.metadata.name for t in retriever.retrieve("send_email")] == ["send_email"]
    assert [rank.get("session_id") for rank in transport.ranks] == ["chat-9"]
