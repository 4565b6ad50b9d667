"""OpenAI Agents SDK agents narrow their tools with toolselect and report the tools they called.

    from toolselect.integrations.openai_agents import ToolselectTools

    toolselect = ToolselectTools(AsyncClient(url), agent="assistant", k=3)
    agent = toolselect.agent(Agent(name="assistant", tools=[...]))
    with toolselect.hooks() as hooks:
        result = await Runner.run(agent, "Will it rain in Turin?", hooks=hooks)

The SDK asks each `FunctionTool.is_enabled` with the run's context before every model call: the
hook it documents for per-run tool choices on an agent shared by concurrent runs. `agent(...)`
copies an agent with its function tools gated there: the first gate of a run ranks the agent's
enabled tools (the tools' own `is_enabled` still apply, first) for the run's input
(`RunContextWrapper.turn_input`: the latest user message, and the conversation before it when the
input carries one) and every gate answers from that one ranking, so the model is offered the `k`
tools toolselect ranks first plus the narrower's `always` tools (and the tool the agent's
`model_settings.tool_choice` forces), and the run costs one rank call.
Hosted tools, MCP servers' tools and handoffs are not narrowed.

`hooks()` is a `RunHooks` for one run: `on_llm_start` notes the ranking the model was shown,
`on_tool_start` every gated tool it called, `on_tool_end` whether the call failed (the SDK's
default failure handler answered the model with its error message, or `tool_failed` says so;
a tool without a failure handler fails the run instead); the run's
turn is reported when the agent produces its final output, or, used as a context manager, when
the block exits (`error` when it raised), in the background. When toolselect is down or slow
the narrower keeps every tool and logs one line; nothing here raises into the run.

`pip install 'toolselect[openai-agents]'`. Importing this loads neither numpy nor onnxruntime.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import inspect
import json
import weakref
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Generic, TypeVar, Unpack

from agents import Agent, FunctionTool, RunContextWrapper, RunHooks, Tool
from agents.agent import AgentBase
from agents.items import TResponseInputItem
from agents.tool import default_tool_error_function

from toolselect.client import AsyncClient, Client
from toolselect.integrations.narrowing import (
    Narrowed,
    NarrowedTurn,
    NarrowingOptions,
    ToolNarrower,
    ToolSpec,
    forced_tools,
    latest_user_text,
)

__all__ = ["ToolselectRunHooks", "ToolselectTools", "conversation"]

C = TypeVar("C")

# What the SDK's default failure handler answers the model when a tool raises.
DEFAULT_FAILURE = default_tool_error_function(RunContextWrapper(None), Exception())


def conversation(items: Sequence[TResponseInputItem]) -> tuple[str, list[str]]:
    """The latest user message of a run's input and the conversation's earlier words, oldest
    first (user and assistant messages; tool calls and outputs are left out)."""
    texts: list[tuple[bool, str]] = []  # (a user message?, its text)
    for item in items:
        if not isinstance(item, dict):
            continue
        role = item.get("role")
        if role not in ("user", "assistant") or item.get("type", "message") != "message":
            continue
        if text := _text(item.get("content")):
            texts.append((role == "user", text))
    return latest_user_text(texts)


def _text(content: object) -> str:
    """A message's words: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    parts = (p.get("text") for p in content if isinstance(p, dict))
    return "\n".join(t.strip() for t in parts if isinstance(t, str) and t.strip())


def _spec(tool: FunctionTool) -> ToolSpec:
    return ToolSpec(tool.name, tool.description or "", tool.params_json_schema or None)


IsEnabled = Callable[[RunContextWrapper[Any], AgentBase[Any]], Any]


async def _enabled(
    attr: bool | IsEnabled, ctx: RunContextWrapper[Any], agent: AgentBase[Any]
) -> bool:
    """A tool's own `is_enabled`, as the SDK evaluates it."""
    if isinstance(attr, bool):
        return attr
    answer = attr(ctx, agent)
    if inspect.isawaitable(answer):
        answer = await answer
    return bool(answer)


class ToolselectTools:
    """Narrows the function tools of the agents it copies (`agent`) through toolselect, and
    makes the per-run hooks (`hooks`) that report what the model called. The keywords go to the
    `ToolNarrower`, `agent` naming the pack. One instance serves every run, concurrent ones
    included: a ranking belongs to its run's context."""

    def __init__(
        self,
        client: AsyncClient | Client,
        *,
        agent: str,
        **options: Unpack[NarrowingOptions],
    ) -> None:
        self.narrower = ToolNarrower(client, agent=agent, **options)
        # Per run (its context, weakly held): the rankings made, by input and catalog.
        self._runs: weakref.WeakKeyDictionary[
            RunContextWrapper[Any], dict[str, asyncio.Future[tuple[str, Narrowed]]]
        ] = weakref.WeakKeyDictionary()
        # Per run: the latest ranking made (its request and what it kept), for the hooks.
        self._latest: weakref.WeakKeyDictionary[RunContextWrapper[Any], tuple[str, Narrowed]] = (
            weakref.WeakKeyDictionary()
        )
        # Names of the tools this instance gates: the calls worth reporting.
        self.names: set[str] = set()

    def agent(self, agent: Agent[C]) -> Agent[C]:
        """A copy of `agent` whose function tools are offered only when the run's ranking keeps
        them (the original agent and its tools are left as they were)."""
        catalog = [t for t in agent.tools if isinstance(t, FunctionTool)]
        rules = [t.is_enabled for t in catalog]
        gated: dict[int, Tool] = {}
        for tool in catalog:
            copied = copy.copy(tool)
            copied.is_enabled = self._gate(tool.name, catalog, rules)
            gated[id(tool)] = copied
            self.names.add(tool.name)
        return agent.clone(tools=[gated.get(id(t), t) for t in agent.tools])

    def hooks(self, *, session_id: str | None = None) -> ToolselectRunHooks[Any]:
        """Fresh `RunHooks` for one run (pass `session_id` to name the conversation)."""
        return ToolselectRunHooks(self, session_id=session_id)

    def shown(self, context: RunContextWrapper[Any]) -> tuple[str, Narrowed] | None:
        """The latest ranking made for the run of `context` (its request and what it kept)."""
        return self._latest.get(context)

    def _gate(
        self, name: str, catalog: list[FunctionTool], rules: list[bool | IsEnabled]
    ) -> IsEnabled:
        async def is_enabled(ctx: RunContextWrapper[Any], agent: AgentBase[Any]) -> bool:
            _, narrowed = await self._narrowing(ctx, agent, catalog, rules)
            return name in narrowed.tools

        return is_enabled

    def _narrowing(
        self,
        ctx: RunContextWrapper[Any],
        agent: AgentBase[Any],
        catalog: list[FunctionTool],
        rules: list[bool | IsEnabled],
    ) -> asyncio.Future[tuple[str, Narrowed]]:
        """The run's ranking of `catalog` for its input: made by the first gate that asks, and
        awaited by the others (the SDK asks every tool's gate at once)."""
        forced = getattr(getattr(agent, "model_settings", None), "tool_choice", None)
        key = hashlib.sha256(
            json.dumps([ctx.turn_input, [t.name for t in catalog], forced], default=str).encode()
        ).hexdigest()
        made = self._runs.setdefault(ctx, {})
        future = made.get(key)
        if future is None:
            future = asyncio.ensure_future(self._narrow(ctx, agent, catalog, rules))
            made[key] = future
        return future

    async def _narrow(
        self,
        ctx: RunContextWrapper[Any],
        agent: AgentBase[Any],
        catalog: list[FunctionTool],
        rules: list[bool | IsEnabled],
    ) -> tuple[str, Narrowed]:
        allowed = await asyncio.gather(*(_enabled(rule, ctx, agent) for rule in rules))
        enabled = [t for t, ok in zip(catalog, allowed, strict=True) if ok]
        request, context = conversation(ctx.turn_input)
        if not request or not enabled:
            return request, Narrowed([t.name for t in enabled], None)
        # The tool the agent's `tool_choice` forces stays, like an `always` one: gated off, the
        # model would be made to call a tool it was not offered.
        settings = getattr(agent, "model_settings", None)
        forced = forced_tools(getattr(settings, "tool_choice", None))
        specs = [_spec(t) for t in enabled]
        narrowed = await self.narrower.narrow(request, specs, context=context, always=forced)
        self._latest[ctx] = (request, narrowed)  # degraded ones too: the calls are still reported
        return request, narrowed


class ToolselectRunHooks(RunHooks[C], Generic[C]):
    """One run's report (see `ToolselectTools.hooks`): the rankings shown, the gated tools called
    and whether their last call failed. `tool_failed(name)` marks a call the application knows
    went wrong (its own failure handler's message, say)."""

    def __init__(self, select: ToolselectTools, *, session_id: str | None = None) -> None:
        self.select = select
        self.session_id = session_id
        self.turn: NarrowedTurn | None = None
        # The ids of the turns reported (one per user request the run answered).
        self.reported: list[str] = []
        self._failed: dict[str, bool] = {}

    async def on_llm_start(
        self,
        context: RunContextWrapper[C],
        agent: Agent[C],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        shown = self.select.shown(context)
        if shown is None:
            return
        request, narrowed = shown
        if self.turn is None or self.turn.request != request:
            self.finish("ok")
            self.turn = self.select.narrower.turn(request, session_id=self.session_id)
        if not self.turn.shown or self.turn.shown[-1] is not narrowed:
            self.turn.shown.append(narrowed)

    async def on_tool_start(
        self, context: RunContextWrapper[C], agent: Agent[C], tool: Tool
    ) -> None:
        if self.turn is not None and tool.name in self.select.names:
            self.turn.called(tool.name)

    async def on_tool_end(
        self, context: RunContextWrapper[C], agent: Agent[C], tool: Tool, result: object
    ) -> None:
        if self.turn is not None and tool.name in self.select.names:
            self._failed[tool.name] = isinstance(result, str) and result == DEFAULT_FAILURE

    def tool_failed(self, name: str) -> None:
        """Mark the latest call of `name` as failed."""
        self._failed[name] = True

    async def on_agent_end(
        self, context: RunContextWrapper[C], agent: Agent[C], output: Any
    ) -> None:
        self.finish("ok")

    def finish(self, outcome: str | None) -> str | None:
        """Report the run's calls (once; none called: nothing); the turn's id."""
        turn, self.turn = self.turn, None
        if turn is None:
            return None
        if any(self._failed.values()):
            outcome = "error"
        self._failed = {}
        turn_id = turn.finish(outcome)
        if turn_id is not None:
            self.reported.append(turn_id)
        return turn_id

    def __enter__(self) -> ToolselectRunHooks[C]:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is None:
            self.finish("ok")
        elif issubclass(kind, asyncio.CancelledError):
            self.finish(None)
        else:
            self.finish("error")
