"""The conversation through the adapters, against a real toolselect server: the narrowing core
sends a turn's `session_id` and the earlier messages and keeps the companions it asks for
(among the agent's tools); the Claude and OpenAI tool searches send the turn's `session_id` and
`context` with each search (through the real SDKs against local stubs), so a pinned session
prior reaches what the model is shown; with nothing pinned the answers are unchanged."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai

from tests.api.conftest import HAND_CATALOG
from tests.api.conversation import pin
from tests.integrations.test_anthropic import sdk
from tests.integrations.test_openai import responses_stub as responses_stub
from tests.live import LiveServer
from tests.services import WatchedTransport
from tests.stubs import ANTHROPIC_MODEL, Stub, claude_with_tool_search, openai_with_tool_search
from toolselect.client import AsyncClient, Client
from toolselect.integrations import anthropic as claude_search
from toolselect.integrations import openai as openai_search
from toolselect.integrations.narrowing import ToolNarrower, ToolSpec
from toolselect.learn.session_fit import SessionWeights

QUESTION = "Will it rain in Turin tomorrow?"
VAGUE = "set it up for tomorrow at ten"
EARLIER = ["hello there", "I need to meet Marco about the budget"]
TOOLS = [
    ToolSpec("send_email", "Send an email message to a recipient with a subject and body."),
    ToolSpec("get_weather", "Current weather and forecast for a city: temperature, rain, wind."),
    ToolSpec("stock_quote", "Latest stock price quote for a ticker symbol on the market."),
    ToolSpec("web_search", "Search the web for pages matching a query and return links."),
    ToolSpec("handoff", "Hand the conversation over to a human operator."),
]
CATALOG = [
    {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}
    for t in HAND_CATALOG
    if t.name in {"get_weather", "send_email", "create_calendar_event", "web_search"}
]


class RecordingTransport(WatchedTransport):
    """The real transport, keeping the body of every `POST /v1/rank`."""

    def __init__(self) -> None:
        super().__init__()
        self.ranks: list[dict[str, Any]] = []

    async def before(self, method: str, url: str, body: bytes | None) -> None:
        if url.endswith("/v1/rank") and body is not None:
            self.ranks.append(json.loads(body))


def conversation_of(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ("session_id", "previous_tools", "context") if k in body}


async def test_narrowing_keeps_the_companions_it_asks_for(server: LiveServer) -> None:
    """With `companions`, the narrowing keeps the ranked tool's companion, in the agent's order
    with the `always` tool; without it, or when the companion is not one of the agent's tools,
    the narrowing is what it was."""
    server.run(pin(server.service))
    async with AsyncClient(server.url) as ts:
        options: dict[str, Any] = {"agent": "conv-narrow", "k": 1, "always": ["handoff"]}
        asking = ToolNarrower(ts, companions=2, timeout_s=10, **options)
        assert await asking.upload(TOOLS)
        kept, search_id = await asking.narrow(QUESTION, TOOLS)
        plain, _ = await ToolNarrower(ts, timeout_s=10, **options).narrow(QUESTION, TOOLS)
        without = [t for t in TOOLS if t.name != "web_search"]
        assert await asking.upload(without)
        narrower, _ = await asking.narrow(QUESTION, without)
    assert search_id is not None
    assert kept == ["get_weather", "web_search", "handoff"]
    assert plain == narrower == ["get_weather", "handoff"]


async def test_narrowing_sends_the_turns_session_and_context(server: LiveServer) -> None:
    """A turn's narrowing sends its `session_id` and the earlier messages (the latest ten,
    each within the size limit, so a long conversation never degrades); a bare narrowing
    sends neither, and on a server without fitted signals both keep the same tools."""
    transport = RecordingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        narrower = ToolNarrower(ts, agent="conv-send", k=2, timeout_s=10)
        assert await narrower.upload(TOOLS)
        turn = narrower.turn(QUESTION, session_id="chat-7")
        in_turn = await turn.narrow(TOOLS, context=EARLIER)
        bare = await narrower.narrow(QUESTION, TOOLS, context=EARLIER)
        long = [*(f"earlier message {i}" for i in range(60)), "é" * 6000]
        lengthy = await turn.narrow(TOOLS, context=long)
    first, second, third = transport.ranks
    assert conversation_of(first) == {"session_id": "chat-7", "context": EARLIER}
    assert not first.get("companions")  # not asked for by default
    assert conversation_of(second) == {"context": EARLIER}
    assert in_turn.tools == bare.tools and in_turn.search_id is not None
    assert lengthy.search_id is not None  # not degraded
    assert len(third["context"]) == 10 and third["context"][-1] == "é" * 4096
    assert all(len(m.encode()) <= 8 << 10 for m in third["context"])


async def claude_turn(
    claude: anthropic.AsyncAnthropic, search: claude_search.ToolSearch, **turn: Any
) -> claude_search.Turn:
    """The Claude host loop of tests/integrations/test_anthropic.py, with the turn's options."""
    messages: list[Any] = [{"role": "user", "content": VAGUE}]
    with search.turn(VAGUE, **turn) as found:
        for _ in range(5):
            reply = await claude.messages.create(
                model=ANTHROPIC_MODEL, max_tokens=256, tools=search.tools(), messages=messages
            )
            messages.append({"role": "assistant", "content": reply.content})
            if reply.stop_reason != "tool_use":
                break
            results: list[Any] = await found.answer(reply)
            results += [
                {"type": "tool_result", "tool_use_id": call.id, "content": "ok"}
                for call in search.tool_calls(reply)
            ]
            messages.append({"role": "user", "content": results})
    return found


async def test_claude_search_sends_the_session_and_context(
    server: LiveServer, anthropic_stub: Stub
) -> None:
    """A Claude turn given `session_id` and `context` sends them with its search: unpinned,
    Claude is shown and uses what it would without them; with a pinned session prior, the tool
    that followed the session's previous one comes first and is the one Claude calls."""
    anthropic_stub.responder = claude_with_tool_search(claude_search.SEARCH_TOOL, VAGUE)
    with Client(server.url) as blocking:  # the session's previous turn, sent on leaving
        blocking.observe("mail Marco the agenda", "send_email", session_id="chat-9")
    transport = RecordingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        search = claude_search.ToolSearch(ts, CATALOG, k=2, pack="conv-claude")
        await search.upload()
        alone = await claude_turn(sdk(anthropic_stub), search)
        with_session = await claude_turn(
            sdk(anthropic_stub), search, session_id="chat-9", context=EARLIER
        )
        server.run(pin(server.service, SessionWeights(prior=1.0)))
        steered = await claude_turn(sdk(anthropic_stub), search, session_id="chat-9")
    assert [conversation_of(body) for body in transport.ranks] == [
        {},
        {"session_id": "chat-9", "context": EARLIER},
        {"session_id": "chat-9"},
    ]
    assert alone.used_tool == with_session.used_tool != "create_calendar_event"
    assert alone.searches[0].tools == with_session.searches[0].tools
    assert steered.used_tool == "create_calendar_event"


async def test_openai_search_sends_the_session_and_context(
    server: LiveServer, responses_stub: Stub
) -> None:
    """The Responses tool search sends a turn's `session_id` and `context` the same way, and
    loads the same functions as without them on a server without fitted signals."""
    responses_stub.responder = openai_with_tool_search(VAGUE)
    model = openai.AsyncOpenAI(api_key="k", base_url=f"{responses_stub.url}/v1", max_retries=0)
    transport = RecordingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        search = openai_search.ToolSearch(ts, CATALOG, k=2, pack="conv-openai")
        await search.upload()
        loaded = []
        for turn in (search.turn(VAGUE), search.turn(VAGUE, session_id="oa-1", context=EARLIER)):
            with turn:
                response = await model.responses.create(
                    model="gpt-5.4",
                    tools=search.tools(),
                    input=[{"role": "user", "content": VAGUE}],
                )
                outputs = await turn.answer(response)
            loaded.append([dict(tool)["name"] for out in outputs for tool in out["tools"]])
    assert [conversation_of(body) for body in transport.ranks] == [
        {},
        {"session_id": "oa-1", "context": EARLIER},
    ]
    assert loaded[0] == loaded[1] and len(loaded[0]) == 2
