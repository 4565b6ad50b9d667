"""LangChain 1.x agents (`langchain.agents.create_agent`): a middleware that narrows the tools of
every model call through toolselect and reports the tools the model then called.

    from langchain.agents import create_agent
    from toolselect.client import Client
    from toolselect.integrations.langchain import ToolselectMiddleware

    ts = Client("http://127.0.0.1:8080")
    agent = create_agent(model, tools, middleware=[ToolselectMiddleware(ts, agent="support")])

Hooks, modelled on LangChain's own `LLMToolSelectorMiddleware`:

- `wrap_model_call`/`awrap_model_call` (narrow): the request's `BaseTool`s are ranked for the
  latest user message (earlier messages are context) and only the top `k` (plus `always` and a
  tool the request's `tool_choice` forces) go to the model, in the agent's order; provider tools
  (dicts) pass through. The LangGraph `thread_id` goes to the ranking as the session. The answer's
  `AIMessage` carries the ranking's id in `response_metadata["toolselect"]`, so the report can
  name the ranking that showed each call, even across processes with a checkpointer.
- `after_agent`/`aafter_agent` (report): once the agent's run ends, the tools called since the
  latest user message are reported, with the search id of the model call that first called one,
  outcome `error` when a tool message has status `error` (else `ok`) and the LangGraph
  `thread_id` as the session.
- `wrap_tool_call`/`awrap_tool_call` (report a failure): a tool exception that leaves the agent
  (LangChain's default for exceptions that are not invocation errors) ends the run before
  `after_agent`; the turn is reported there with outcome `error` (the same turn id, so a run that
  goes on after all is stored once).

`agent.invoke`/`stream` run the synchronous hooks, which need a blocking `Client`; `ainvoke`
and `astream` work with either client. Nothing here raises into the agent: toolselect down or
slow (over `timeout_s`) means every tool is offered and one line is logged.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, Unpack

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse, ToolCallRequest
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime
from langgraph.types import Command

from toolselect.client import AsyncClient, Client
from toolselect.integrations.narrowing import (
    Narrowed,
    NarrowingOptions,
    ToolNarrower,
    ToolSpec,
    forced_tools,
    log,
)

# Where the narrowing's id travels with the model's answer.
METADATA_KEY = "toolselect"
# A turn's id is derived from the id of its user message: every report of one turn has one id.
_TURN_NAMESPACE = uuid.UUID("0d1c5e3a-6a8f-4b59-9a39-7f1f3c2b8e41")
_SPEC_CACHE_LIMIT = 4096

ModelResult = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]


class ToolselectMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Narrows each model call's tools to the turn's top `k` (plus `always`) and reports the
    tools called; see the module's docstring. `agent` names the catalog's pack."""

    def __init__(
        self,
        client: AsyncClient | Client,
        *,
        agent: str,
        **options: Unpack[NarrowingOptions],
    ) -> None:
        super().__init__()
        self.narrower = ToolNarrower(client, agent=agent, **options)
        # Tool objects are long-lived; their schema is converted once (id -> (tool, spec)).
        self._specs: dict[int, tuple[BaseTool, ToolSpec]] = {}
        self._catalog: set[str] = set()

    @property
    def name(self) -> str:
        return "ToolselectMiddleware"

    # -- narrow ----------------------------------------------------------------------------

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResult:
        prepared = self._prepare(request)
        if prepared is None:
            return handler(request)
        question, context, specs = prepared
        forced = forced_tools(request.tool_choice)
        session_id = _thread_id(request.runtime)
        narrowed = self.narrower.narrow_sync(
            question, specs, context=context, always=forced, session_id=session_id
        )
        return _tagged(handler(_offer(request, narrowed)), narrowed)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResult:
        prepared = self._prepare(request)
        if prepared is None:
            return await handler(request)
        question, context, specs = prepared
        forced = forced_tools(request.tool_choice)
        session_id = _thread_id(request.runtime)
        narrowed = await self.narrower.narrow(
            question, specs, context=context, always=forced, session_id=session_id
        )
        return _tagged(await handler(_offer(request, narrowed)), narrowed)

    def _prepare(self, request: ModelRequest[Any]) -> tuple[str, list[str], list[ToolSpec]] | None:
        """The user's latest words, the conversation before them and the rankable tools;
        None when there is nothing to narrow."""
        try:
            tools = [t for t in request.tools if isinstance(t, BaseTool)]
            split = _latest_user(request.messages)
            if not tools or split is None:
                return None
            index, question = split
            context = [_text(m) for m in request.messages[:index] if _conversational(m)]
            return question, context, [self._spec(t) for t in tools]
        except Exception as exc:  # never break the agent's call over our own bookkeeping
            log.warning(
                "toolselect_narrow_skipped", extra={"error": f"{type(exc).__name__}: {exc}"}
            )
            return None

    def _spec(self, tool: BaseTool) -> ToolSpec:
        cached = self._specs.get(id(tool))
        if cached is not None and cached[0] is tool:
            return cached[1]
        function = convert_to_openai_tool(tool)["function"]
        spec = ToolSpec(tool.name, function.get("description") or "", function.get("parameters"))
        if len(self._specs) >= _SPEC_CACHE_LIMIT:
            self._specs.clear()
        self._specs[id(tool)] = (tool, spec)
        self._catalog.add(tool.name)
        return spec

    # -- report ----------------------------------------------------------------------------

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._report(state["messages"], runtime)
        return None

    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        self._report(state["messages"], runtime)
        return None

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        try:
            return handler(request)
        except GraphBubbleUp:
            raise
        except Exception:
            self._report_failure(request)
            raise

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        try:
            return await handler(request)
        except GraphBubbleUp:
            raise
        except Exception:
            self._report_failure(request)
            raise

    def _report_failure(self, request: ToolCallRequest) -> None:
        state: Any = request.state
        messages = state.get("messages", []) if isinstance(state, dict) else []
        self._report(messages, request.runtime, failed=True)

    def _report(
        self, messages: Sequence[AnyMessage], runtime: Any, *, failed: bool = False
    ) -> str | None:
        """Report the tools called since the latest user message; the turn's id."""
        try:
            turn = called_since_user(messages, self._catalog)
            if turn is None:
                return None
            human, called, search_id, errored = turn
            return self.narrower.report(
                _text(human),
                called,
                search_id=search_id,
                outcome="error" if failed or errored else "ok",
                session_id=_thread_id(runtime),
                turn_id=turn_id_of(human),
            )
        except Exception as exc:
            log.warning("toolselect_report_failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            return None


def called_since_user(
    messages: Sequence[BaseMessage], catalog: Collection[str]
) -> tuple[HumanMessage, list[str], str | None, bool] | None:
    """The latest user message, the catalog tools called after it (in order), the search id of
    the model call that made the first of those calls and whether a tool answered an error;
    None when no catalog tool was called."""
    split = _latest_user(messages)
    if split is None:
        return None
    index = split[0]
    human = messages[index]
    assert isinstance(human, HumanMessage)
    called: list[str] = []
    search_id: str | None = None
    errored = False
    for message in messages[index + 1 :]:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call["name"] not in catalog:
                    continue
                if not called:
                    search_id = search_id_of(message)
                called.append(call["name"])
        elif isinstance(message, ToolMessage) and message.status == "error":
            errored = errored or message.name in catalog or message.name is None
    if not called:
        return None
    return human, called, search_id, errored


def search_id_of(message: AIMessage) -> str | None:
    """The id of the narrowing that chose the tools this model answer was offered."""
    tag = message.response_metadata.get(METADATA_KEY)
    found = tag.get("search_id") if isinstance(tag, dict) else None
    return found if isinstance(found, str) else None


def turn_id_of(human: BaseMessage) -> str | None:
    """One id per user message (LangGraph gives every message an id), else a new one."""
    return uuid.uuid5(_TURN_NAMESPACE, human.id).hex if human.id else None


def _offer(request: ModelRequest[Any], narrowed: Narrowed) -> ModelRequest[Any]:
    """The request with only the kept `BaseTool`s (provider tools stay)."""
    kept = set(narrowed.tools)
    tools = [t for t in request.tools if not isinstance(t, BaseTool) or t.name in kept]
    return request.override(tools=tools)


def _tagged(result: ModelResult, narrowed: Narrowed) -> ModelResult:
    """The model's answer with the narrowing's id in its AIMessage's `response_metadata`."""
    tag = {"search_id": narrowed.search_id, "offered": len(narrowed.tools)}
    if isinstance(result, AIMessage):
        result.response_metadata[METADATA_KEY] = tag
    elif isinstance(result, ModelResponse):
        for message in result.result:
            if isinstance(message, AIMessage):
                message.response_metadata[METADATA_KEY] = tag
    elif isinstance(result, ExtendedModelResponse):
        _tagged(result.model_response, narrowed)
    return result


def _latest_user(messages: Sequence[BaseMessage]) -> tuple[int, str] | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, HumanMessage):
            text = _text(message)
            if text.strip():
                return index, text
    return None


def _conversational(message: BaseMessage) -> bool:
    """A user's or the assistant's words (tool traffic and system prompts are not context)."""
    return isinstance(message, HumanMessage) or (
        isinstance(message, AIMessage) and not message.tool_calls
    )


def _text(message: BaseMessage) -> str:
    return str(message.text)


def _thread_id(runtime: Any) -> str | None:
    info = getattr(runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None)
    return str(thread) if thread else None
