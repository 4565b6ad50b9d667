"""Claude tool search backed by toolselect.

Claude is given every catalog tool with `defer_loading: true` (their schemas stay out of the
prompt) and one custom search tool. When Claude calls the search tool, toolselect ranks the
catalog for its query and the answer is a `tool_result` of `tool_reference` blocks, which
makes those tools callable. When the turn ends, the catalog tools Claude called are reported to
`observe` with the `search_id` of the search Claude picked from (and the outcome: `error` when
the turn raised, else `turn.outcome` when the host sets it), so a mis-route becomes a learning
signal, and a tool that worked a label, without code in the agent.

    search = ToolSearch(toolselect_client, catalog)
    with search.turn(user_text) as turn:
        reply = await claude.messages.create(..., tools=search.tools(), messages=messages)
        results = await turn.answer(reply)          # for the search calls
        results += run_my_tools(search.tool_calls(reply))
        turn.outcome = "ok"                         # optional: when the host knows

If toolselect fails (down, refusing, empty catalog), `upload()` returns False and the search
answers references to the whole catalog (or its first `fallback_limit` tools), each with one
log line: the host's loop goes on as if there were no search.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from anthropic.types import Message, ToolParam, ToolResultBlockParam, ToolUseBlock

from toolselect.client import AsyncClient
from toolselect.integrations.search import (
    SEARCH_DESCRIPTION,
    SEARCH_TOOL,
    CatalogSearch,
    TurnReport,
    search_parameters,
)
from toolselect.integrations.uploads import ToolSpec

__all__ = ["SEARCH_TOOL", "ToolSearch", "Turn"]


class ToolSearch(CatalogSearch):
    """A catalog of Anthropic-format tools searched through toolselect.

    `catalog` holds dicts with `name`, `description` and `input_schema` (MCP's `inputSchema`
    is accepted too). `k` is how many tools a search reveals when Claude does not ask for a
    number; `pack` scopes the upload and the reports.
    """

    def __init__(
        self, client: AsyncClient, catalog: Sequence[Mapping[str, Any]], **options: Any
    ) -> None:
        self.catalog = [_deferred(tool) for tool in catalog]
        specs = [
            ToolSpec(t["name"], str(t.get("description") or ""), t["input_schema"])
            for t in self.catalog
        ]
        super().__init__(client, specs, **options)

    def tools(self) -> list[ToolParam]:
        """The `tools` for `messages.create`: the search tool, then the deferred catalog."""
        search: ToolParam = {
            "name": self.name,
            "description": SEARCH_DESCRIPTION,
            "input_schema": search_parameters(self.k),
        }
        return [search, *self.catalog]

    def tool_calls(self, message: Message) -> list[ToolUseBlock]:
        """The calls in `message` the host runs itself: every `tool_use` but the search's."""
        return [b for b in message.content if b.type == "tool_use" and b.name != self.name]

    def turn(
        self,
        request: str,
        *,
        session_id: str | None = None,
        context: Sequence[str] | None = None,
    ) -> Turn:
        """One user request, from its first `messages.create` to the final answer; `session_id`
        names the conversation it belongs to, `context` its earlier user messages (oldest
        first). Both go with the turn's searches."""
        return Turn(self, request, session_id=session_id, context=context)


class Turn(TurnReport):
    """Answers the search calls of one request and reports the tool Claude used for it."""

    search: ToolSearch

    def __enter__(self) -> Turn:
        return self

    async def answer(self, message: Message) -> list[ToolResultBlockParam]:
        """`tool_result` blocks of `tool_reference`s for every search call in `message`."""
        results: list[ToolResultBlockParam] = []
        for block in message.content:
            if block.type != "tool_use":
                continue
            self.called(block.name)
            if block.name != self.search.name:
                continue
            found = await self.find(block.input)
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": block.id,
                    "content": [{"type": "tool_reference", "tool_name": n} for n in found],
                }
            )
        return results


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
