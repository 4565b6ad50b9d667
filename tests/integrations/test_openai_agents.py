"""OpenAI Agents SDK agents narrowed by toolselect, run by the real SDK against a local stand-in
of the Responses API (which records the tools each model call was offered) and a real toolselect
server: the model is offered the ranked tools, the tool it calls reaches the store as a turn
with its search id and outcome, concurrent runs of one agent are ranked apart, and a
toolselect that is down or silent leaves every tool in place."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
import pytest
import pytest_asyncio
from agents import Agent, FunctionTool, ModelSettings, RunConfig, Runner, function_tool
from agents.models.openai_responses import OpenAIResponsesModel

from tests.api.conversation import pin
from tests.integrations.agent_stubs import (
    STOCKS,
    TOOLS,
    WEATHER,
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
from toolselect.integrations.openai_agents import ToolselectRunHooks, ToolselectTools, conversation
from toolselect.learn.session_fit import SessionWeights

AGENT = "openai-agents-test"
# No trace export: the SDK would send the runs' traces to api.openai.com.
OFFLINE = RunConfig(tracing_disabled=True)


@pytest_asyncio.fixture(loop_scope="function")
async def responses() -> AsyncIterator[Stub]:
    """A local stand-in for `POST /v1/responses`."""
    async for stub in start_stub("/v1/responses"):
        yield stub


@pytest_asyncio.fixture(loop_scope="function")
async def model(responses: Stub) -> AsyncIterator[OpenAIResponsesModel]:
    """The SDK's Responses model on the stand-in (its HTTP client closed with the test)."""
    client = openai.AsyncOpenAI(api_key="test-key", base_url=f"{responses.url}/v1", max_retries=0)
    async with client:
        yield OpenAIResponsesModel("gpt-5.4", openai_client=client)


@pytest_asyncio.fixture(loop_scope="function")
async def silent() -> AsyncIterator[str]:
    async for url in silent_toolselect():
        yield url


def tools(weather: Callable[[str], str] | None = None, **options: Any) -> list[FunctionTool]:
    """The catalog as SDK function tools; `weather` replaces get_weather's body, `options` go
    to every `function_tool`."""

    def make(name: str, description: str) -> FunctionTool:
        def run(city: str = "") -> str:
            if weather is not None and name == "get_weather":
                return weather(city)
            return f"{name} done for {city}"

        return function_tool(run, name_override=name, description_override=description, **options)

    return [make(name, description) for name, description in TOOLS.items()]


def assistant(model: OpenAIResponsesModel, catalog: list[FunctionTool] | None = None) -> Agent[Any]:
    return Agent(name="assistant", model=model, tools=[*(tools() if catalog is None else catalog)])


def offered(stub: Stub) -> list[list[str]]:
    return [offered_by_responses(r.body) for r in stub.received]


async def test_a_run_offers_the_ranked_tools_and_its_call_is_stored(
    model: OpenAIResponsesModel, server: LiveServer, responses: Stub
) -> None:
    """Both model calls of a run offer the top k plus the `always` tool, in the agent's order,
    from one ranking; the called tool reaches the store with its id and outcome `ok`."""
    responses.responder = responses_model("get_weather")
    async with AsyncClient(server.url) as ts:
        select = ToolselectTools(ts, agent=AGENT, k=2, always=["handoff"])
        agent = select.agent(assistant(model))
        with select.hooks(session_id="conversation-7") as hooks:
            result = await Runner.run(agent, WEATHER, hooks=hooks, run_config=OFFLINE)
    assert result.final_output == "Done."
    first, second = offered(responses)
    assert first == second
    assert "get_weather" in first and first[-1] == "handoff" and len(first) == 3
    assert first == [n for n in TOOLS if n in first]

    (turn_id,) = hooks.reported
    stored = wait_for_turn(server, turn_id)
    assert (stored.request, stored.used_tool, stored.pack) == (WEATHER, "get_weather", AGENT)
    assert (stored.outcome, stored.search_status, stored.session_id) == (
        "ok", "shown", "conversation-7"
    )  # fmt: skip
    assert stored.search_id is not None


async def test_the_original_agent_and_its_tools_are_untouched(
    model: OpenAIResponsesModel,
) -> None:
    """`agent()` copies: the agent given keeps its own tools, ungated."""
    original = assistant(model)
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", retries=0) as ts:
        copied = ToolselectTools(ts, agent=AGENT).agent(original)
    assert copied is not original
    assert all(isinstance(t, FunctionTool) and t.is_enabled is True for t in original.tools)
    assert [t.name for t in copied.tools] == [t.name for t in original.tools]


async def test_concurrent_runs_of_one_agent_are_ranked_apart(
    model: OpenAIResponsesModel, server: LiveServer, responses: Stub
) -> None:
    """Two runs at once on one narrowed agent: each model call is offered the tool that fits
    its own run's question, and each run reports its own turn."""
    responses.responder = responses_model()
    async with AsyncClient(server.url) as ts:
        select = ToolselectTools(ts, agent=AGENT, k=1)
        agent = select.agent(assistant(model))

        async def run(question: str) -> ToolselectRunHooks[Any]:
            with select.hooks() as hooks:
                await Runner.run(agent, question, hooks=hooks, run_config=OFFLINE)
            return hooks

        weather, stocks = await asyncio.gather(run(WEATHER), run(STOCKS))
    by_question = {r.body["input"][0]["content"]: offered_by_responses(r.body)
                   for r in responses.received}  # fmt: skip
    assert by_question == {WEATHER: ["get_weather"], STOCKS: ["stock_quote"]}
    assert wait_for_turn(server, weather.reported[0]).used_tool == "get_weather"
    assert wait_for_turn(server, stocks.reported[0]).used_tool == "stock_quote"


async def test_the_conversation_joins_the_ranking_and_the_latest_message_is_the_request(
    model: OpenAIResponsesModel, server: LiveServer, responses: Stub
) -> None:
    """A follow-up that only makes sense with the history is ranked with it as `context`, which
    a server whose session fit weighs context (pinned here) uses; the query and the turn's
    request are the latest message alone."""
    server.run(pin(server.service, SessionWeights(context=0.5)))
    responses.responder = responses_model()
    history: list[Any] = [
        {"role": "user", "content": "I want the latest stock price quote for ACME."},
        {"role": "assistant", "content": "Which market is the ticker on?"},
        {"role": "user", "content": "Milan, please."},
    ]
    async with AsyncClient(server.url) as ts:
        select = ToolselectTools(ts, agent=AGENT, k=1)
        with select.hooks() as hooks:
            await Runner.run(
                select.agent(assistant(model)), history, hooks=hooks, run_config=OFFLINE
            )
    assert offered(responses)[0] == ["stock_quote"]
    stored = wait_for_turn(server, hooks.reported[0])
    assert (stored.request, stored.used_tool) == ("Milan, please.", "stock_quote")


def test_conversation_reads_messages_only() -> None:
    items: list[Any] = [
        {"role": "user", "content": "first question"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "an answer"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "second question"}]},
    ]  # fmt: skip
    assert conversation(items) == ("second question", ["first question", "an answer"])
    assert conversation([]) == ("", [])


async def test_a_tool_the_application_disables_is_never_offered_nor_ranked(
    model: OpenAIResponsesModel, server: LiveServer, responses: Stub
) -> None:
    """A tool's own `is_enabled` is asked first: a disabled tool takes no place in the top k."""
    responses.responder = responses_model()
    catalog = tools()
    catalog[1].is_enabled = False  # get_weather
    async with AsyncClient(server.url) as ts:
        select = ToolselectTools(ts, agent=AGENT, k=1)
        with select.hooks() as hooks:
            await Runner.run(
                select.agent(assistant(model, catalog)), WEATHER, hooks=hooks,
                run_config=OFFLINE,
            )  # fmt: skip
    assert "get_weather" not in offered(responses)[0] and len(offered(responses)[0]) == 1


async def test_a_failing_tool_reports_error(
    model: OpenAIResponsesModel, server: LiveServer, responses: Stub
) -> None:
    """A tool that raises is answered by the SDK's default failure handler; the run goes on
    and its turn is reported with outcome `error`."""

    def broken(city: str) -> str:
        raise RuntimeError("weather service down")

    responses.responder = responses_model("get_weather")
    async with AsyncClient(server.url) as ts:
        select = ToolselectTools(ts, agent=AGENT, k=2)
        with select.hooks() as hooks:
            result = await Runner.run(
                select.agent(assistant(model, tools(broken))), WEATHER, hooks=hooks,
                run_config=OFFLINE,
            )  # fmt: skip
    assert result.final_output == "Done."
    stored = wait_for_turn(server, hooks.reported[0])
    assert (stored.used_tool, stored.outcome) == ("get_weather", "error")


async def test_a_run_that_raises_reports_error_when_the_block_exits(
    model: OpenAIResponsesModel, server: LiveServer, responses: Stub
) -> None:
    """A tool without a failure handler ends the run with its exception; leaving the hooks'
    block reports the turn with outcome `error`."""

    def broken(city: str) -> str:
        raise RuntimeError("weather service down")

    responses.responder = responses_model("get_weather")
    catalog = tools(broken, failure_error_function=None)
    async with AsyncClient(server.url) as ts:
        select = ToolselectTools(ts, agent=AGENT, k=2)
        with pytest.raises(Exception, match="weather service down"), select.hooks() as hooks:
            await Runner.run(
                select.agent(assistant(model, catalog)), WEATHER, hooks=hooks,
                run_config=OFFLINE,
            )  # fmt: skip
    stored = wait_for_turn(server, hooks.reported[0])
    assert (stored.used_tool, stored.outcome) == ("get_weather", "error")


async def test_a_stopped_toolselect_keeps_every_tool_and_logs_once(
    model: OpenAIResponsesModel, responses: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing listens: every tool is offered on every model call, the run completes, one line
    is logged."""
    responses.responder = responses_model("get_weather")
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", retries=0) as ts:
        select = ToolselectTools(ts, agent=AGENT, k=1)
        with (
            caplog.at_level(logging.WARNING, logger="toolselect.integrations"),
            select.hooks() as hooks,
        ):
            result = await Runner.run(
                select.agent(assistant(model)), WEATHER, hooks=hooks, run_config=OFFLINE
            )
    assert result.final_output == "Done."
    assert offered(responses) == [list(TOOLS), list(TOOLS)]
    degraded = [r for r in caplog.records if r.getMessage() == "toolselect_narrow_degraded"]
    assert len(degraded) == 1
    assert "Unreachable" in degraded[0].__dict__["error"]
    assert len(hooks.reported) == 1  # reported all the same (without a search id)


async def test_a_silent_toolselect_costs_the_run_one_timeout(
    model: OpenAIResponsesModel, silent: str, responses: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    responses.responder = responses_model("get_weather")
    async with AsyncClient(silent, retries=0) as ts:
        select = ToolselectTools(ts, agent=AGENT, k=1, timeout_s=0.2)
        started = time.perf_counter()
        with caplog.at_level(logging.WARNING, logger="toolselect.integrations"):
            result = await Runner.run(select.agent(assistant(model)), WEATHER, run_config=OFFLINE)
        elapsed = time.perf_counter() - started
    assert result.final_output == "Done."
    assert offered(responses) == [list(TOOLS), list(TOOLS)]
    assert 0.2 <= elapsed < 1.5
    degraded = [r for r in caplog.records if r.getMessage() == "toolselect_narrow_degraded"]
    assert len(degraded) == 1
    assert "TimeoutError" in degraded[0].__dict__["error"]


def test_import_leaves_the_model_stack_out() -> None:
    assert imported_heavy_modules("toolselect.integrations.openai_agents") == []


def test_the_readme_shows_the_example_verbatim() -> None:
    assert shown_in_readme("openai_agents_sdk.py")


async def test_the_example_runs(server: LiveServer, responses: Stub) -> None:
    """The README's agent on the SDK's default Responses model, pointed at a local stand-in:
    both model calls are offered the 2 tools toolselect ranks first, the model calls
    get_weather, and the server stores that turn with the ranking's search id."""
    responses.responder = responses_model("get_weather")
    env = environment(
        TOOLSELECT_URL=server.url,
        OPENAI_BASE_URL=f"{responses.url}/v1",
        OPENAI_API_KEY="test",
        OPENAI_AGENTS_DISABLE_TRACING="1",  # no trace export to api.openai.com
    )
    out = await run_example("openai_agents_sdk.py", env)
    found = re.fullmatch(r"Done.\nreported as turn (\w+)\n", out)
    assert found is not None, out
    first, second = offered(responses)
    assert first == second and len(first) == 2 and "get_weather" in first
    stored = await asyncio.to_thread(wait_for_turn, server, found.group(1))
    assert (stored.used_tool, stored.pack, stored.outcome) == ("get_weather", "assistant-oa", "ok")
    assert stored.search_id is not None and stored.search_status == "shown"


async def test_the_tool_the_agents_tool_choice_forces_is_offered(
    model: OpenAIResponsesModel, server: LiveServer, responses: Stub
) -> None:
    """`model_settings.tool_choice="send_email"` with k=1 on a weather question: send_email is
    offered beside the ranked tool (it was gated off while the request still forced it)."""
    responses.responder = responses_model("send_email")
    async with AsyncClient(server.url) as ts:
        select = ToolselectTools(ts, agent=AGENT, k=1)
        forced = assistant(model).clone(model_settings=ModelSettings(tool_choice="send_email"))
        with select.hooks() as hooks:
            await Runner.run(select.agent(forced), WEATHER, hooks=hooks, run_config=OFFLINE)
    assert offered(responses)[0] == ["send_email", "get_weather"]
    assert responses.received[0].body["tool_choice"] == {"type": "function", "name": "send_email"}
