"""PydanticAI agents narrowed by toolselect, run by PydanticAI's own `FunctionModel` (which sees
exactly the tools the agent offers each step) against a real toolselect server: the model is
offered the ranked tools, the tool it calls reaches the store as a turn with its search id and
outcome, and a toolselect that is down or silent leaves every tool in place. The README's
example runs with PydanticAI's OpenAI Responses model against a local stand-in."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from pydantic_ai import Agent, ModelRetry, Tool
from pydantic_ai.capabilities import PrepareTools
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.settings import ModelSettings, ToolOrOutput

from tests.api.conversation import pin
from tests.integrations.agent_stubs import (
    STOCKS,
    TOOLS,
    WEATHER,
    first_offered,
    imported_heavy_modules,
    offered_by_responses,
    responses_model,
    shown_in_readme,
    silent_toolselect,
)
from tests.integrations.test_examples import environment, run_example
from tests.live import LiveServer, wait_for_turn
from tests.services import free_port
from tests.stubs import Stub, start_stub
from toolselect.client import AsyncClient
from toolselect.integrations.narrowing import ToolNarrower
from toolselect.integrations.pydantic_ai import ToolselectCapability, conversation, prepare_tools
from toolselect.learn.session_fit import SessionWeights

AGENT = "pydantic-ai-test"
# What a narrowing may wait here: the tests check what is offered, not how fast (a loaded
# machine can take longer than the default 0.25 s for a first ranking).
PATIENT = 10.0


def tools(failing: Callable[[str], str] | None = None) -> list[Tool[None]]:
    """The catalog as PydanticAI tools; `failing` replaces get_weather's body."""

    def make(name: str, description: str) -> Tool[None]:
        def run(city: str = "") -> str:
            if failing is not None and name == "get_weather":
                return failing(city)
            return f"{name} done for {city}"

        return Tool(run, name=name, description=description)

    return [make(name, description) for name, description in TOOLS.items()]


class Scripted:
    """A `FunctionModel` body that records the tools of every request, calls the first of
    `prefer` it is offered, and closes with a text once a tool answered (or gave up)."""

    def __init__(self, *prefer: str, retries_before_text: int = 0) -> None:
        self.prefer = prefer
        self.offered: list[list[str]] = []
        self.retries_before_text = retries_before_text

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.offered.append([t.name for t in info.function_tools])
        last = messages[-1].parts[-1]
        retried = isinstance(last, RetryPromptPart) or (
            isinstance(last, ToolReturnPart) and last.outcome != "success"
        )
        if isinstance(last, ToolReturnPart) and not retried:
            return ModelResponse(parts=[TextPart("Done.")])
        if retried:
            if self.retries_before_text <= 0:
                return ModelResponse(parts=[TextPart("I could not do it.")])
            self.retries_before_text -= 1
        name = first_offered(self.offered[-1], self.prefer)
        return ModelResponse(parts=[ToolCallPart(name, {"city": "Turin"})])


def agent(model: Scripted, select: ToolselectCapability, **kwargs: Any) -> Agent[None, str]:
    return Agent(FunctionModel(model), tools=tools(**kwargs), capabilities=[select])


@pytest_asyncio.fixture(loop_scope="function")
async def responses() -> AsyncIterator[Stub]:
    """A local stand-in for `POST /v1/responses`."""
    async for stub in start_stub("/v1/responses"):
        yield stub


@pytest_asyncio.fixture(loop_scope="function")
async def silent() -> AsyncIterator[str]:
    async for url in silent_toolselect():
        yield url


async def test_a_run_offers_the_ranked_tools_and_its_call_is_stored(server: LiveServer) -> None:
    """Every step of a run offers the top k plus the `always` tool, in the agent's order, from
    one ranking; the tool called reaches the store with that ranking's id, outcome `ok` and the
    run's conversation id."""
    model = Scripted("get_weather")
    async with AsyncClient(server.url) as ts:
        select = ToolselectCapability(ts, agent=AGENT, k=2, always=["handoff"], timeout_s=PATIENT)
        run = Agent(FunctionModel(model), tools=tools(), capabilities=[select])
        result = await run.run(WEATHER)
    assert result.output == "Done."
    first, second = model.offered
    assert first == second
    assert "get_weather" in first and first[-1] == "handoff" and len(first) == 3
    assert first == [n for n in TOOLS if n in first]  # the agent's order, only fewer

    (turn_id,) = select.reported
    stored = wait_for_turn(server, turn_id)
    assert (stored.request, stored.used_tool, stored.pack) == (WEATHER, "get_weather", AGENT)
    assert (stored.outcome, stored.search_status, stored.shown_position) == ("ok", "shown", 1)
    assert stored.search_id is not None
    assert stored.session_id == result.all_messages()[0].conversation_id


async def test_the_tools_tool_choice_names_are_offered(server: LiveServer) -> None:
    """An agent whose `tool_choice` names a tool the ranking left out is offered it too
    (PydanticAI refused the run: a tool_choice naming a tool it was not given)."""
    model = Scripted("get_weather")
    async with AsyncClient(server.url) as ts:
        select = ToolselectCapability(ts, agent=AGENT, k=1, timeout_s=PATIENT)
        settings = ModelSettings(tool_choice=ToolOrOutput(function_tools=["send_email"]))
        run = Agent(
            FunctionModel(model), tools=tools(), capabilities=[select], model_settings=settings
        )
        await run.run(WEATHER)
    assert set(model.offered[0]) == {"get_weather", "send_email"}


async def test_each_run_is_ranked_for_its_own_prompt(server: LiveServer) -> None:
    """One agent, two questions: each run offers the tools that fit its own question."""
    model = Scripted()
    async with AsyncClient(server.url) as ts:
        select = ToolselectCapability(ts, agent=AGENT, k=1, timeout_s=PATIENT)
        run = Agent(FunctionModel(model), tools=tools(), capabilities=[select])
        await run.run(WEATHER)
        await run.run(STOCKS)
    assert [offered[0] for offered in model.offered] == [
        "get_weather", "get_weather", "stock_quote", "stock_quote"
    ]  # fmt: skip
    weather, stocks = (wait_for_turn(server, t) for t in select.reported)
    assert (weather.used_tool, stocks.used_tool) == ("get_weather", "stock_quote")
    assert weather.search_id != stocks.search_id


async def test_concurrent_runs_of_one_agent_are_ranked_apart(server: LiveServer) -> None:
    """Two runs at once on one agent: each run's copy of the capability offers and reports the
    tool that fits its own prompt."""
    offered: dict[str, list[list[str]]] = {}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt, _ = conversation(messages)
        offered.setdefault(prompt, []).append([t.name for t in info.function_tools])
        if isinstance(messages[-1].parts[-1], ToolReturnPart):
            return ModelResponse(parts=[TextPart("Done.")])
        return ModelResponse(parts=[ToolCallPart(info.function_tools[0].name, {"city": "x"})])

    async with AsyncClient(server.url) as ts:
        select = ToolselectCapability(ts, agent=AGENT, k=1, timeout_s=PATIENT)
        run = Agent(FunctionModel(model), tools=tools(), capabilities=[select])
        await asyncio.gather(run.run(WEATHER), run.run(STOCKS))
    assert offered == {WEATHER: [["get_weather"]] * 2, STOCKS: [["stock_quote"]] * 2}
    used = {wait_for_turn(server, t).used_tool for t in select.reported}
    assert used == {"get_weather", "stock_quote"}


async def test_the_conversation_before_the_latest_prompt_joins_the_ranking(
    server: LiveServer,
) -> None:
    """A follow-up that only makes sense with the history is ranked with it as `context`, which
    a server whose session fit weighs context (pinned here) uses; the query and the turn's
    request are the latest prompt alone."""
    server.run(pin(server.service, SessionWeights(context=0.5)))
    model = Scripted()
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("I want the latest stock price quote for ACME.")]),
        ModelResponse(parts=[TextPart("Which market is the ticker on?")]),
    ]
    async with AsyncClient(server.url) as ts:
        select = ToolselectCapability(ts, agent=AGENT, k=1, timeout_s=PATIENT)
        run = Agent(FunctionModel(model), tools=tools(), capabilities=[select])
        await run.run("Milan, please.", message_history=history)
    assert model.offered[0] == ["stock_quote"]
    stored = wait_for_turn(server, select.reported[0])
    assert (stored.request, stored.used_tool) == ("Milan, please.", "stock_quote")


def test_conversation_reads_prompts_and_text_only() -> None:
    """The request is the latest user prompt; the context is the earlier prompts and model
    text, without tool calls and returns."""
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("first question")]),
        ModelResponse(parts=[TextPart("an answer"), ToolCallPart("get_weather", {})]),
        ModelRequest(parts=[ToolReturnPart("get_weather", "sunny", tool_call_id="c1")]),
        ModelRequest(parts=[UserPromptPart(["second", "question"])]),
        ModelResponse(parts=[TextPart("after")]),
    ]
    assert conversation(messages) == ("second\nquestion", ["first question", "an answer"])
    assert conversation([], "the run's prompt") == ("the run's prompt", [])


async def test_a_tool_that_keeps_failing_reports_error(server: LiveServer) -> None:
    """A tool that asks for a retry and never succeeds makes the turn's outcome `error`."""

    def failing(city: str) -> str:
        raise ModelRetry(f"no forecast for {city}")

    async with AsyncClient(server.url) as ts:
        select = ToolselectCapability(ts, agent=AGENT, k=2, timeout_s=PATIENT)
        result = await agent(Scripted("get_weather"), select, failing=failing).run(WEATHER)
    assert result.output == "I could not do it."
    stored = wait_for_turn(server, select.reported[0])
    assert (stored.used_tool, stored.outcome) == ("get_weather", "error")


async def test_a_failure_then_success_reports_ok_and_a_raising_run_reports_error(
    server: LiveServer,
) -> None:
    """A retry the tool then satisfies is a success; a tool that raises ends the run and the
    turn is reported with outcome `error`."""
    attempts: list[str] = []

    def flaky(city: str) -> str:
        attempts.append(city)
        if len(attempts) == 1:
            raise ModelRetry("try again")
        return "rain"

    def broken(city: str) -> str:
        raise RuntimeError("weather service down")

    async with AsyncClient(server.url) as ts:
        select = ToolselectCapability(ts, agent=AGENT, k=2, timeout_s=PATIENT)
        flaky_agent = Agent(
            FunctionModel(Scripted("get_weather", retries_before_text=1)),
            tools=tools(failing=flaky),
            capabilities=[select],
        )
        assert (await flaky_agent.run(WEATHER)).output == "Done."
        broken_agent = Agent(
            FunctionModel(Scripted("get_weather")),
            tools=tools(failing=broken),
            capabilities=[select],
        )
        with pytest.raises(RuntimeError, match="weather service down"):
            await broken_agent.run(WEATHER)
    flaky_turn, broken_turn = (wait_for_turn(server, t) for t in select.reported)
    assert (flaky_turn.used_tool, flaky_turn.outcome) == ("get_weather", "ok")
    assert (broken_turn.used_tool, broken_turn.outcome) == ("get_weather", "error")


async def test_a_run_that_calls_no_tool_reports_nothing(server: LiveServer) -> None:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Hello!")])

    async with AsyncClient(server.url) as ts:
        select = ToolselectCapability(ts, agent=AGENT, k=2, timeout_s=PATIENT)
        run = Agent(FunctionModel(answer), tools=tools(), capabilities=[select])
        assert (await run.run(WEATHER)).output == "Hello!"
    assert list(select.reported) == []
    assert ts.observe_stats.sent == 0


async def test_prepare_tools_alone_narrows_every_step(server: LiveServer) -> None:
    """`prepare_tools(narrower)` in PydanticAI's own `PrepareTools` capability narrows without
    reporting."""
    model = Scripted("get_weather")
    async with AsyncClient(server.url) as ts:
        narrower = ToolNarrower(ts, agent=AGENT, k=1)
        run = Agent(
            FunctionModel(model),
            tools=tools(),
            capabilities=[PrepareTools(prepare_tools(narrower))],
        )
        await run.run(WEATHER)
    assert model.offered == [["get_weather"], ["get_weather"]]
    assert ts.observe_stats.sent == 0


async def test_a_stopped_toolselect_keeps_every_tool_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing listens: every tool is offered, the run completes, one line is logged."""
    model = Scripted("get_weather")
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", retries=0) as ts:
        select = ToolselectCapability(ts, agent=AGENT, k=1, timeout_s=PATIENT)
        with caplog.at_level(logging.WARNING, logger="toolselect.integrations"):
            result = await agent(model, select).run(WEATHER)
    assert result.output == "Done."
    assert model.offered == [list(TOOLS), list(TOOLS)]
    degraded = [r for r in caplog.records if r.getMessage() == "toolselect_narrow_degraded"]
    assert len(degraded) == 1
    assert "Unreachable" in degraded[0].__dict__["error"]


async def test_a_silent_toolselect_costs_the_run_one_timeout(
    silent: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A toolselect that never answers holds the run for the narrower's timeout, once; the
    model gets every tool."""
    model = Scripted("get_weather")
    async with AsyncClient(silent, retries=0) as ts:
        select = ToolselectCapability(ts, agent=AGENT, k=1, timeout_s=0.2)
        started = time.perf_counter()
        with caplog.at_level(logging.WARNING, logger="toolselect.integrations"):
            result = await agent(model, select).run(WEATHER)
        elapsed = time.perf_counter() - started
    assert result.output == "Done."
    assert model.offered == [list(TOOLS), list(TOOLS)]
    assert 0.2 <= elapsed < 1.5
    degraded = [r for r in caplog.records if r.getMessage() == "toolselect_narrow_degraded"]
    assert len(degraded) == 1
    assert "TimeoutError" in degraded[0].__dict__["error"]


def test_import_leaves_the_model_stack_out() -> None:
    assert imported_heavy_modules("toolselect.integrations.pydantic_ai") == []


def test_the_readme_shows_the_example_verbatim() -> None:
    assert shown_in_readme("pydantic_ai_agent.py")


async def test_the_example_runs(server: LiveServer, responses: Stub) -> None:
    """The README's agent, with PydanticAI's OpenAI Responses model on a local stand-in: the
    model is offered the 2 tools toolselect ranks first, calls get_weather, and the server
    stores that turn with the ranking's search id."""
    responses.responder = responses_model("get_weather")
    env = environment(
        TOOLSELECT_URL=server.url, OPENAI_BASE_URL=f"{responses.url}/v1", OPENAI_API_KEY="test"
    )
    out = await run_example("pydantic_ai_agent.py", env)
    found = re.fullmatch(r"Done.\nreported as turn (\w+)\n", out)
    assert found is not None, out
    first, second = (offered_by_responses(r.body) for r in responses.received)
    assert first == second and len(first) == 2 and "get_weather" in first
    stored = await asyncio.to_thread(wait_for_turn, server, found.group(1))
    assert (stored.used_tool, stored.pack, stored.outcome) == ("get_weather", "assistant-pa", "ok")
    assert stored.search_id is not None and stored.search_status == "shown"
