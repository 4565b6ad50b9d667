"""LangGraph agents with many tools (`langgraph-bigtool`): toolselect as the tool retriever.

    from langgraph_bigtool import create_agent
    from toolselect.integrations.langgraph import ToolselectRetriever

    retriever = ToolselectRetriever(Client(url), registry, agent="big-agent", k=3)
    agent = create_agent(
        llm,
        registry,
        retrieve_tools_function=retriever.retrieve_tools_function,
        retrieve_tools_coroutine=retriever.retrieve_tools_coroutine,
    ).compile()
    result = agent.invoke({"messages": [...]})
    retriever.report(result["messages"])

bigtool's agent starts with one tool, `retrieve_tools(query)`; each call of it is answered here
by toolselect's ranking of the registry (the ids of the `k` best tools; every tool, with one
log line, when toolselect cannot answer in `timeout_s`), with the run's LangGraph `thread_id`
(`config["configurable"]["thread_id"]`) as the session. The functions take the run's config as
LangChain injects it (a `RunnableConfig` parameter, left out of the tool's arguments: the
model is asked for `query` alone). bigtool's graph has no hook after its tools run, so the host
reports the run: `report(messages)` sends the registry tools called since the latest user
message, the search id of the retrieval that showed the first one, `error` when a tool message
says so, and the session: `session_id` when given, else the thread the run's retrieval ranked
with. One retriever serving concurrent threads that may send the same query should pass the
thread as `session_id`: the retrieval is then looked up under that thread (else the latest
retrieval of that query, whichever thread made it). Only `langchain-core` and
`langgraph-bigtool` are needed (`pip install 'toolselect[langgraph]'`).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from toolselect.client import AsyncClient, Client
from toolselect.integrations.narrowing import (
    DEFAULT_TIMEOUT_S,
    Narrowed,
    ToolNarrower,
    ToolSpec,
    log,
    shown_by,
)

# The retrievals remembered for `report` ((thread, query) -> what it showed), newest last.
_REMEMBERED = 256
# The config of a direct call, outside a graph: LangChain injects the run's in its place, and
# only for a parameter annotated exactly `RunnableConfig` (so not `RunnableConfig | None`).
_NO_CONFIG: RunnableConfig = {}


class ToolselectRetriever:
    """`retrieve_tools_function`/`retrieve_tools_coroutine` for `langgraph_bigtool.create_agent`
    over `registry` (tool id -> tool or function), and `report` for the host's run."""

    def __init__(
        self,
        client: AsyncClient | Client,
        registry: Mapping[str, BaseTool | Callable[..., Any]],
        *,
        agent: str,
        k: int = 2,
        always: Collection[str] = (),
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.narrower = ToolNarrower(client, agent=agent, k=k, always=always, timeout_s=timeout_s)
        self.specs: list[ToolSpec] = []
        self._ids: dict[str, str] = {}  # tool name -> registry id
        for tool_id, tool in registry.items():
            function = convert_to_openai_tool(tool)["function"]
            name = function["name"]
            self.specs.append(
                ToolSpec(name, function.get("description") or "", function.get("parameters"))
            )
            self._ids[name] = tool_id
        self._shown: OrderedDict[tuple[str | None, str], Narrowed] = OrderedDict()
        self.retrieve_tools_function = self._function()
        self.retrieve_tools_coroutine = self._coroutine()

    def _function(self) -> Callable[..., list[str]]:
        def retrieve_tools(query: str, config: RunnableConfig = _NO_CONFIG) -> list[str]:
            """Retrieve the tools that fit what you need to do, given a search query."""
            thread = _thread_id(config)
            narrowed = self.narrower.narrow_sync(query, self.specs, session_id=thread)
            return self._ids_of(thread, query, narrowed)

        return retrieve_tools

    def _coroutine(self) -> Callable[..., Any]:
        async def retrieve_tools(query: str, config: RunnableConfig = _NO_CONFIG) -> list[str]:
            """Retrieve the tools that fit what you need to do, given a search query."""
            thread = _thread_id(config)
            narrowed = await self.narrower.narrow(query, self.specs, session_id=thread)
            return self._ids_of(thread, query, narrowed)

        return retrieve_tools

    def _ids_of(self, thread: str | None, query: str, narrowed: Narrowed) -> list[str]:
        self._shown[thread, query] = narrowed
        self._shown.move_to_end((thread, query))
        while len(self._shown) > _REMEMBERED:
            self._shown.popitem(last=False)
        return [self._ids[name] for name in narrowed.tools]

    def _retrieval(self, query: str, thread: str | None) -> tuple[str | None, Narrowed] | None:
        """The retrieval of `query` made in `thread`, else the latest of it in any thread (the
        report does not always know the run's thread), with the thread it ranked in."""
        if (found := self._shown.get((thread, query))) is not None:
            return thread, found
        for (seen, asked), narrowed in reversed(self._shown.items()):
            if asked == query:
                return seen, narrowed
        return None

    def report(
        self,
        messages: Sequence[BaseMessage],
        *,
        session_id: str | None = None,
        retrieval_tool: str = "retrieve_tools",
    ) -> str | None:
        """Report the registry tools called since the latest user message in `messages` (the
        run's result); the turn's id, or None when none was called. The turn's session is
        `session_id`, else the thread the run's first retrieval ranked with. Never raises."""
        try:
            return self._report(messages, session_id, retrieval_tool)
        except Exception as exc:
            log.warning("toolselect_report_failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            return None

    def _report(
        self, messages: Sequence[BaseMessage], session_id: str | None, retrieval_tool: str
    ) -> str | None:
        start = next(
            (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], HumanMessage)),
            None,
        )
        if start is None:
            return None
        human = messages[start]
        shown: list[Narrowed] = []
        threads: list[str | None] = []
        called: list[str] = []
        search_id: str | None = None
        failed = False
        for message in messages[start + 1 :]:
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    if call["name"] == retrieval_tool:
                        query = str(call["args"].get("query", ""))
                        if (found := self._retrieval(query, session_id)) is not None:
                            threads.append(found[0])
                            shown.append(found[1])
                    elif call["name"] in self._ids:
                        if not called:
                            search_id = shown_by(shown, call["name"])
                        called.append(call["name"])
            elif isinstance(message, ToolMessage) and message.status == "error":
                failed = True
        turn_id = uuid.uuid5(uuid.NAMESPACE_URL, f"toolselect:{human.id}").hex if human.id else None
        return self.narrower.report(
            str(human.text),
            called,
            search_id=search_id,
            outcome="error" if failed else "ok",
            # The session the ranking saw, so the stored turn and its ranking name one
            # conversation; a caller's own id wins (it may name conversations its own way).
            session_id=session_id or next((t for t in threads if t), None),
            turn_id=turn_id,
        )


def _thread_id(config: RunnableConfig) -> str | None:
    thread = (config.get("configurable") or {}).get("thread_id")
    return str(thread) if thread else None
