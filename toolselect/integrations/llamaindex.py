"""LlamaIndex agents (`FunctionAgent`, `ReActAgent`, `AgentWorkflow`): toolselect as the agent's
`tool_retriever`, and a report of the run's tool calls.

    from llama_index.core.agent.workflow import FunctionAgent
    from toolselect.integrations.llamaindex import ToolselectToolRetriever

    retriever = ToolselectToolRetriever(AsyncClient(url), tools, agent="helper", k=3)
    chat = retriever.for_session(conversation_id)  # one conversation: ranked and reported
    agent = FunctionAgent(tool_retriever=chat, llm=llm)
    output = await agent.run(user_msg=question)
    chat.report(output, question)

- **Narrow** (`aretrieve`/`retrieve`): LlamaIndex's agents ask their `tool_retriever` for tools
  with the user's latest message before every model call; the answer is the `k` best tools
  (plus `always`), in the order given, or every tool (one log line) when toolselect cannot
  answer within `timeout_s`. The agents also look a tool up by its exact name right before
  calling it (`get_tools(tool_name)`): such a query is answered with that tool, unranked.
- **Session**: the agents hand their retriever the query text alone (no `Context`, no memory,
  whose `session_id` only LlamaIndex's private workflow state could reach), so the retriever
  carries the conversation's session: `session_id=` when it serves one conversation, else
  `for_session(session_id)`, a retriever for one conversation sharing the tools, the narrower
  and the remembered rankings, cheap to make per conversation (with its agent, which holds its
  `tool_retriever`). Its narrowings are ranked with the session and its `report` stores the
  turn with it (a `session_id` given to `report` wins); its rankings are remembered under the
  session, so two conversations sending the same message keep their own search ids.
- **Report**: a run's `AgentOutput.tool_calls` holds every tool call of the run, with the
  tool's error flag (`ToolOutput.is_error`: LlamaIndex hands tool exceptions back to the model
  as error results). `report(output, user_msg)` sends them with the search id of the run's
  first narrowing (the model calls tools only in the steps before its last, so the first tool
  came from the first ranking) and `error` when a call failed. LlamaIndex has no hook that sees
  a run's end from inside the agent (its instrumentation events carry only text summaries), so
  the host calls it, as it awaits the run.

`aretrieve` works with either client (agents run on an event loop); the synchronous `retrieve`
needs a blocking `Client`. `pip install 'toolselect[llama-index]'`.
"""

from __future__ import annotations

import copy
import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.objects import ObjectRetriever
from llama_index.core.schema import QueryBundle, QueryType
from llama_index.core.tools import BaseTool, FunctionTool

from toolselect.client import AsyncClient, Client
from toolselect.integrations.narrowing import (
    DEFAULT_TIMEOUT_S,
    Narrowed,
    ToolNarrower,
    ToolSpec,
    log,
    shown_by,
)

# User messages whose narrowings are kept for `report` ((session, query) -> this run's
# narrowings).
_REMEMBERED = 256
_PER_RUN = 64


class ToolselectToolRetriever(ObjectRetriever[BaseTool]):
    """An `ObjectRetriever` of `tools` (LlamaIndex tools or plain functions) ranked by
    toolselect; see the module's docstring. `agent` names the catalog's pack; `session_id`,
    the conversation this retriever ranks and reports for (see `for_session`)."""

    def __init__(
        self,
        client: AsyncClient | Client,
        tools: Sequence[BaseTool | Callable[..., Any]],
        *,
        agent: str,
        k: int = 5,
        always: Collection[str] = (),
        timeout_s: float = DEFAULT_TIMEOUT_S,
        session_id: str | None = None,
    ) -> None:
        # No node retriever or node mapping behind it: `retrieve`/`aretrieve` are overridden.
        self.narrower = ToolNarrower(client, agent=agent, k=k, always=always, timeout_s=timeout_s)
        self.tools = [
            t if isinstance(t, BaseTool) else FunctionTool.from_defaults(t) for t in tools
        ]
        self._by_name = {t.metadata.get_name(): t for t in self.tools}
        self.specs = [
            ToolSpec(name, tool.metadata.description, tool.metadata.get_parameters_dict())
            for name, tool in self._by_name.items()
        ]
        self.session_id = session_id
        self._runs: OrderedDict[tuple[str | None, str], list[Narrowed]] = OrderedDict()

    def for_session(self, session_id: str | None) -> ToolselectToolRetriever:
        """This retriever for one conversation: its narrowings rank with `session_id` and its
        `report` stores the turn with it. Shares everything else with this one (the catalog
        is not uploaded again, and the rankings are remembered in one place)."""
        sibling = copy.copy(self)
        sibling.session_id = session_id
        return sibling

    def retrieve(self, str_or_query_bundle: QueryType) -> list[BaseTool]:
        query = _query(str_or_query_bundle)
        if query in self._by_name:
            return [self._by_name[query]]
        narrowed = self.narrower.narrow_sync(query, self.specs, session_id=self.session_id)
        return self._tools(query, narrowed)

    async def aretrieve(self, str_or_query_bundle: QueryType) -> list[BaseTool]:
        query = _query(str_or_query_bundle)
        if query in self._by_name:
            return [self._by_name[query]]
        narrowed = await self.narrower.narrow(query, self.specs, session_id=self.session_id)
        return self._tools(query, narrowed)

    def _tools(self, query: str, narrowed: Narrowed) -> list[BaseTool]:
        key = (self.session_id, query)
        runs = self._runs.setdefault(key, [])
        if len(runs) < _PER_RUN:
            runs.append(narrowed)
        self._runs.move_to_end(key)
        while len(self._runs) > _REMEMBERED:
            self._runs.popitem(last=False)
        return [self._by_name[name] for name in narrowed.tools]

    def report(
        self, output: Any, user_msg: str | ChatMessage, *, session_id: str | None = None
    ) -> str | None:
        """Report the tools the run that answered `user_msg` called (`output`: its
        `AgentOutput`); the turn's id, or None when it called none. The turn's session is
        `session_id`, else this retriever's (the one its rankings saw). Never raises."""
        try:
            request = user_msg if isinstance(user_msg, str) else str(user_msg.content or "")
            # The rankings of the conversation named, which may have run on its own retriever
            # (`for_session`), else this retriever's.
            named = (session_id or self.session_id, request)
            own = named if named in self._runs else (self.session_id, request)
            shown = self._runs.pop(own, [])
            called: list[str] = []
            failed = False
            for call in getattr(output, "tool_calls", None) or []:
                name = getattr(call, "tool_name", None)
                if name not in self._by_name:
                    continue
                called.append(name)
                result = getattr(call, "tool_output", None)
                failed = failed or bool(getattr(result, "is_error", False))
            if not called:
                return None
            first = shown[0] if shown and called[0] in shown[0].tools else None
            search_id = first.search_id if first is not None else shown_by(shown, called[0])
            return self.narrower.report(
                request,
                called,
                search_id=search_id,
                outcome="error" if failed else "ok",
                session_id=session_id or self.session_id,
                turn_id=uuid.uuid4().hex,
            )
        except Exception as exc:
            log.warning("toolselect_report_failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            return None


def _query(given: QueryType) -> str:
    if isinstance(given, QueryBundle):
        return given.query_str
    return str(given)
