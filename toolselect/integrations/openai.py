"""OpenAI Responses API tool search backed by toolselect (client-executed `tool_search`).

The Responses API's own shape for the same idea: catalog functions go in `tools` with
`defer_loading: true` beside `{"type": "tool_search", "execution": "client"}`; the model emits a
`tool_search_call` item, and the host answers a `tool_search_output` item whose `tools` are the
definitions to load (full definitions, where Claude takes references). Everything else (ranking
within the catalog, the degraded answer, one `observe` per turn with the search id the model
picked from) is `search.CatalogSearch`'s and `search.TurnReport`'s.

    search = ToolSearch(toolselect_client, catalog)
    with search.turn(user_text) as turn:
        response = await openai.responses.create(..., tools=search.tools(), input=items)
        items += [*response.output, *await turn.answer(response)]
        items += run_my_tools(search.tool_calls(response))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseFunctionToolCall,
    ResponseToolSearchOutputItemParamParam,
    ToolParam,
    ToolSearchToolParam,
)

from toolselect.client import AsyncClient
from toolselect.integrations.search import (
    SEARCH_DESCRIPTION,
    CatalogSearch,
    TurnReport,
    search_parameters,
)
from toolselect.integrations.uploads import ToolSpec

__all__ = ["ToolSearch", "Turn"]


class ToolSearch(CatalogSearch):
    """A catalog of Responses API function tools searched through toolselect.

    `catalog` holds Responses function tools (`{"type": "function", "name", "description",
    "parameters"}`); Anthropic- or MCP-shaped dicts (`input_schema`/`inputSchema`) are
    converted.
    """

    def __init__(
        self, client: AsyncClient, catalog: Sequence[Mapping[str, Any]], **options: Any
    ) -> None:
        self.catalog = {t["name"]: t for t in (_deferred(tool) for tool in catalog)}
        specs = [
            ToolSpec(name, t.get("description") or "", t.get("parameters") or {"type": "object"})
            for name, t in self.catalog.items()
        ]
        super().__init__(client, specs, **options)

    def tools(self) -> list[ToolParam]:
        """The `tools` for `responses.create`: client-executed search, then the catalog."""
        search: ToolSearchToolParam = {
            "type": "tool_search",
            "execution": "client",
            "description": SEARCH_DESCRIPTION,
            "parameters": search_parameters(self.k),
        }
        return [search, *self.catalog.values()]

    def tool_calls(self, response: Response) -> list[ResponseFunctionToolCall]:
        """The `function_call` items the host runs itself."""
        return [item for item in response.output if item.type == "function_call"]

    def turn(
        self,
        request: str,
        *,
        session_id: str | None = None,
        context: Sequence[str] | None = None,
    ) -> Turn:
        """One user request, from its first `responses.create` to the final answer; `session_id`
        names the conversation it belongs to, `context` its earlier user messages (oldest
        first). Both go with the turn's searches."""
        return Turn(self, request, session_id=session_id, context=context)


class Turn(TurnReport):
    """Answers the tool searches of one request and reports the function the model used."""

    search: ToolSearch

    def __enter__(self) -> Turn:
        return self

    async def answer(self, response: Response) -> list[ResponseToolSearchOutputItemParamParam]:
        """A `tool_search_output` for every client-executed `tool_search_call` in `response`."""
        outputs: list[ResponseToolSearchOutputItemParamParam] = []
        for item in response.output:
            if item.type == "function_call":
                self.called(item.name)
            elif item.type == "tool_search_call" and item.execution == "client":
                found = await self.find(item.arguments)
                outputs.append(
                    {
                        "type": "tool_search_output",
                        "call_id": item.call_id,
                        "execution": "client",
                        "status": "completed",
                        "tools": [self.search.catalog[name] for name in found],
                    }
                )
        return outputs


def _deferred(tool: Mapping[str, Any]) -> FunctionToolParam:
    """The tool as a Responses function marked `defer_loading`."""
    if tool.get("type") == "function" and "function" in tool:  # Chat Completions' nesting
        tool = tool["function"]
    name = tool.get("name")
    if not isinstance(name, str):
        raise ValueError(f"expected a tool with a string `name`, got {dict(tool)!r}")
    schema = tool.get("parameters", tool.get("input_schema", tool.get("inputSchema")))
    return {
        "type": "function",
        "name": name,
        "description": tool.get("description") or "",
        "parameters": dict(schema) if schema else {"type": "object", "properties": {}},
        "strict": tool.get("strict", False),
        "defer_loading": True,
    }
