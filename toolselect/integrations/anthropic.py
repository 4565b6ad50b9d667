"""Claude tool search backed by toolselect.

Claude is given every catalog tool with `defer_loading: true` (their schemas stay out of the
prompt) and one custom search tool. When Claude calls the search tool, toolselect ranks the
catalog for its query and the answer is a `tool_result` of `tool_reference` blocks, which
makes those tools callable. When the turn ends, the catalog tool Claude called is reported to
`observe`, so a mis-route becomes a learning signal without code in the agent.

    search = ToolSearch(toolselect_client, catalog)
    with search.turn(user_text) as turn:
        reply = await claude.messages.create(..., tools=search.tools(), messages=messages)
        results = await turn.answer(reply)          # for the search calls
        results += run_my_tools(search.tool_calls(reply))

If toolselect fails (down, refusing, empty catalog), the search answers references to the
whole catalog (or its first `fallback_limit` tools) and logs one `toolselect_search_degraded`
line: the host's loop goes on as if there were no search.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from anthropic.types import (
    Message,
    ToolParam,
    ToolReferenceBlockParam,
    ToolResultBlockParam,
    ToolUseBlock,
)

from toolselect.api.models import UpsertResponse
from toolselect.client import AsyncClient

# stdlib logging: this runs in the host's process and follows its logging setup.
log = logging.getLogger(__name__)

SEARCH_TOOL = "toolselect_search"
SEARCH_DESCRIPTION = (
    "Search the available tools by what you need to do. Returns references to the tools that "
    "fit best, which you can then call. Use it whenever the tool you need is not loaded yet."
)
# Enough for a search to reveal alternatives without loading a large share of the catalog.
MAX_K = 20


class ToolSearch:
    """A catalog of Anthropic-format tools searched through toolselect.

    `catalog` holds dicts with `name`, `description` and `input_schema` (MCP's `inputSchema`
    is accepted too). `k` is how many tools a search reveals when Claude does not ask for a
    number; `pack` scopes the upload and the reports.
    """

    def __init__(
        self,
        client: AsyncClient,
        catalog: Sequence[Mapping[str, Any]],
        *,
        name: str = SEARCH_TOOL,
        k: int = 5,
        pack: str | None = None,
        agent_id: str | None = None,
        fallback_limit: int | None = None,
    ) -> None:
        self.client = client
        self.catalog = [_deferred(tool) for tool in catalog]
        self.names = [tool["name"] for tool in self.catalog]
        if name in self.names:
            raise ValueError(f"expected a search tool name not in the catalog, got {name!r}")
        self.name = name
        self.k = k
        self.pack = pack
        self.agent_id = agent_id
        self.fallback_limit = fallback_limit

    def tools(self) -> list[ToolParam]:
        """The `tools` for `messages.create`: the search tool, then the deferred catalog."""
        search: ToolParam = {
            "name": self.name,
            "description": SEARCH_DESCRIPTION,
            "input_schema": {
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "What the tool should do, in the user's words.",
                    },
                    "k": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_K,
                        "description": f"How many tools to return (default {self.k}).",
                    },
                },
                "required": ["query"],
            },
        }
        return [search, *self.catalog]

    async def upload(self) -> UpsertResponse:
        """Put the catalog into toolselect (under `pack`); unchanged tools cost nothing."""
        tools = [
            {"name": t["name"], "description": t.get("description", ""), **_schema(t)}
            for t in self.catalog
        ]
        return await self.client.tools.put(tools, pack=self.pack)

    def tool_calls(self, message: Message) -> list[ToolUseBlock]:
        """The calls in `message` the host runs itself: every `tool_use` but the search's."""
        return [b for b in message.content if b.type == "tool_use" and b.name != self.name]

    def turn(self, request: str) -> Turn:
        """One user request, from its first `messages.create` to the final answer."""
        return Turn(self, request)

    async def search(self, query: str, k: int) -> list[ToolReferenceBlockParam]:
        """References to the `k` best catalog tools for `query`; never raises."""
        try:
            ranking = await self.client.rank(query, k, tools=self.names)
            found = [r.tool for r in ranking.results if r.tool in self.names]
            if not found:
                raise LookupError("toolselect knows none of the catalog's tools (not uploaded?)")
        except Exception as exc:
            # Any failure, ours included: the contract is that the host's loop never breaks.
            found = self.names[: self.fallback_limit]
            log.warning(
                "toolselect_search_degraded",
                extra={"error": f"{type(exc).__name__}: {exc}", "revealed": len(found)},
            )
        return [{"type": "tool_reference", "tool_name": name} for name in found]


class Turn:
    """Answers the search calls of one request and reports the tool Claude used for it."""

    def __init__(self, search: ToolSearch, request: str) -> None:
        self.search = search
        self.request = request
        self.turn_id = uuid.uuid4().hex
        self.used_tool: str | None = None
        self._reported = False

    async def answer(self, message: Message) -> list[ToolResultBlockParam]:
        """`tool_result` blocks for every search call in `message`, in order; notes the first
        catalog tool Claude calls (the one the request was routed to)."""
        results: list[ToolResultBlockParam] = []
        for block in message.content:
            if block.type != "tool_use":
                continue
            if block.name != self.search.name:
                if self.used_tool is None:
                    self.used_tool = block.name
                continue
            query, k = self._arguments(block.input)
            references = await self.search.search(query, k)
            results.append({"type": "tool_result", "tool_use_id": block.id, "content": references})
        return results

    def _arguments(self, given: Mapping[str, object]) -> tuple[str, int]:
        query = given.get("query")
        if not isinstance(query, str) or not query.strip():
            query = self.request
        k = given.get("k")
        if not isinstance(k, int) or isinstance(k, bool):
            k = self.search.k
        return query, max(1, min(k, MAX_K))

    def finish(self, outcome: str | None = None) -> str | None:
        """Report the tool Claude used (once; a turn that called none reports nothing) and
        return its name."""
        if not self._reported and self.used_tool is not None:
            self._reported = True
            self.search.client.observe(
                self.request,
                self.used_tool,
                turn_id=self.turn_id,
                agent_id=self.search.agent_id,
                pack=self.search.pack,
                outcome=outcome,
            )
        return self.used_tool

    def __enter__(self) -> Turn:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish("error" if exc is not None else None)


def _schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    schema = tool.get("input_schema", tool.get("inputSchema"))
    return {"input_schema": dict(schema) if schema else {"type": "object"}}


def _deferred(tool: Mapping[str, Any]) -> ToolParam:
    """The tool in Anthropic's format, marked `defer_loading` (kept out of the prompt until a
    `tool_reference` names it)."""
    if not isinstance(tool.get("name"), str):
        raise ValueError(f"expected a tool with a string `name`, got {dict(tool)!r}")
    deferred: dict[str, Any] = {
        k: v for k, v in tool.items() if k not in {"inputSchema", "input_schema"}
    }
    deferred.update(_schema(tool), defer_loading=True)
    return deferred  # type: ignore[return-value]
