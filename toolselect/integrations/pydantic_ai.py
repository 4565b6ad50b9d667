"""PydanticAI agents narrow their tools with toolselect and report the tools they called.

    from toolselect.integrations.pydantic_ai import ToolselectCapability

    toolselect = ToolselectCapability(AsyncClient(url), agent="assistant", k=3)
    agent = Agent(model, tools=[...], capabilities=[toolselect])

`ToolselectCapability` is a PydanticAI capability (`pydantic_ai.capabilities.AbstractCapability`,
the framework's hook for behaviour around a run; `Agent(prepare_tools=...)` of earlier releases
is now the `PrepareTools` capability):

- `prepare_tools`, before every model request of a run, offers the model only the `k` function
  tools toolselect ranks first for the run's latest user prompt and the conversation before it
  (`RunContext.messages`), plus the `always` tools; output tools are left alone. The
  ranking is made once per run and reused by its later steps while the conversation's words are
  the same (a tool's result adds none), so a run costs one rank call (and, when toolselect does
  not answer, one wait and one log line).
- `wrap_tool_execute` notes every function tool the model called and whether its last execution
  failed (the tool raised, including `ModelRetry` and `ToolFailed`; a deferral or an approval
  request is not a failure).
- `wrap_run` reports the run's calls once it ends, in the background: the search id of the
  ranking that showed them, outcome `error` when a call's last execution failed or the run
  raised, else `ok`, and the run's `conversation_id` as the session; `reported` keeps the
  turns' ids.

When toolselect is down or slow the narrower keeps every tool and logs one line; nothing here
raises into the agent's run. `prepare_tools(narrower)` is the narrowing alone, as a plain
`ToolsPrepareFunc` for `PrepareTools(...)` or a toolset's `.prepared(...)`.

`pip install 'toolselect[pydantic-ai]'`. Importing this loads neither numpy nor onnxruntime.
"""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import Sequence
from typing import Any, Unpack

from pydantic_ai import RunContext
from pydantic_ai.capabilities import (
    AbstractCapability,
    ValidatedToolArgs,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, SkipToolExecution
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.run import AgentRunResult
from pydantic_ai.settings import ToolOrOutput
from pydantic_ai.tools import ToolDefinition, ToolsPrepareFunc

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

__all__ = ["ToolselectCapability", "conversation", "prepare_tools", "specs"]

# Raised by a tool or a hook to defer or short-cut a call: control flow, not a failed tool.
_CONTROL_FLOW = (ApprovalRequired, CallDeferred, SkipToolExecution)


def specs(tool_defs: Sequence[ToolDefinition]) -> list[ToolSpec]:
    """PydanticAI's tool definitions as the catalog toolselect ranks."""
    return [
        ToolSpec(d.name, d.description or "", d.parameters_json_schema or None) for d in tool_defs
    ]


def conversation(messages: Sequence[ModelMessage], prompt: object = None) -> tuple[str, list[str]]:
    """The run's latest user prompt and the conversation's earlier words, oldest first: user
    prompts and the model's text (tool calls and returns are left out: the ranking is about
    what the user asked). `prompt` (the run's own) stands in when no message carries one."""
    texts: list[tuple[bool, str]] = []  # (a user prompt?, its text)
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and (text := _text(part.content)):
                    texts.append((True, text))
        elif isinstance(message, ModelResponse):
            for reply in message.parts:
                if isinstance(reply, TextPart) and reply.content.strip():
                    texts.append((False, reply.content.strip()))
    latest, earlier = latest_user_text(texts)
    return latest or _text(prompt), earlier


def _text(content: object) -> str:
    """The words of a user prompt: a string, or the strings of a multi-part prompt."""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, Sequence):
        return "\n".join(c.strip() for c in content if isinstance(c, str) and c.strip())
    return ""


def _keep(
    ctx: RunContext[Any], tool_defs: list[ToolDefinition], narrowed: Narrowed
) -> list[ToolDefinition]:
    """The narrowed tools, and the ones the agent's `tool_choice` names: PydanticAI refuses a
    `tool_choice` naming a tool it was not given, which would end the run. (The step's settings
    are resolved after this hook, so the agent's own are read; a `tool_choice` given only to
    `run()` is not seen here.)"""
    settings = ctx.model_settings or getattr(ctx.agent, "model_settings", None)
    choice = settings.get("tool_choice") if isinstance(settings, dict) else None
    if isinstance(choice, ToolOrOutput):
        choice = choice.function_tools
    kept = set(narrowed.tools) | forced_tools(choice)
    return [d for d in tool_defs if d.name in kept]


def prepare_tools(narrower: ToolNarrower) -> ToolsPrepareFunc[Any]:
    """The narrowing alone (no reporting), as a `ToolsPrepareFunc`:
    `Agent(..., capabilities=[PrepareTools(prepare_tools(narrower))])`. Ranks at every step."""

    async def prepare(
        ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        request, context = conversation(ctx.messages, ctx.prompt)
        if not request or not tool_defs:
            return tool_defs
        narrowed = await narrower.narrow(request, specs(tool_defs), context=context)
        return _keep(ctx, tool_defs, narrowed)

    return prepare


class ToolselectCapability(AbstractCapability[Any]):
    """Narrows a PydanticAI agent's function tools through toolselect and reports the tools the
    model called (see the module's docstring). The keywords go to the `ToolNarrower`, `agent`
    naming the pack. One instance serves every run of the agent: each run gets its own copy
    (`for_run`) holding that run's ranking and calls; `reported` collects the turns' ids."""

    def __init__(
        self,
        client: AsyncClient | Client,
        *,
        agent: str,
        **options: Unpack[NarrowingOptions],
    ) -> None:
        self.narrower = ToolNarrower(client, agent=agent, **options)
        # The ids of the turns reported, newest last (shared by the runs' copies).
        self.reported: deque[str] = deque(maxlen=1000)
        self._turn: NarrowedTurn | None = None
        # The run's ranking and what it was made from: (request, context, tool names).
        self._shown: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], Narrowed] | None = None
        # Per called tool, whether its latest execution failed.
        self._failed: dict[str, bool] = {}

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a client: not buildable from an agent spec file

    async def for_run(self, ctx: RunContext[Any]) -> ToolselectCapability:
        run = copy.copy(self)
        run._turn, run._shown, run._failed = None, None, {}
        return run

    async def prepare_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        request, context = conversation(ctx.messages, ctx.prompt)
        if not request or not tool_defs:
            return tool_defs
        key = (request, tuple(context), tuple(d.name for d in tool_defs))
        if self._shown is not None and self._shown[0] == key:
            return _keep(ctx, tool_defs, self._shown[1])
        if self._turn is None or self._turn.request != request:
            self._finish(None)
            self._turn = self.narrower.turn(request, session_id=ctx.conversation_id)
        narrowed = await self._turn.narrow(specs(tool_defs), context=context)
        # Kept even when it degraded: a run waits for an absent toolselect (and logs it) once.
        self._shown = (key, narrowed)
        return _keep(ctx, tool_defs, narrowed)

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        if tool_def.kind != "function" or self._turn is None:
            return await handler(args)
        self._turn.called(call.tool_name)
        try:
            result = await handler(args)
        except _CONTROL_FLOW:
            raise
        except Exception:
            self._failed[call.tool_name] = True
            raise
        self._failed[call.tool_name] = False
        return result

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        try:
            result = await handler()
        except asyncio.CancelledError:
            self._finish(None)  # stopped from outside: how the tools went is unknown
            raise
        except BaseException:
            self._finish("error")
            raise
        self._finish("ok")
        return result

    def _finish(self, outcome: str | None) -> None:
        """Report the run's calls (once; a run that called no tool reports nothing)."""
        if self._turn is None:
            return
        if any(self._failed.values()):
            outcome = "error"
        if (turn_id := self._turn.finish(outcome)) is not None:
            self.reported.append(turn_id)
        self._turn, self._shown = None, None
        self._failed.clear()
