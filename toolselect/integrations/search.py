"""What every tool-search adapter shares: toolselect's ranking restricted to the host's catalog,
degraded to the whole catalog on any failure (the upload's too), and one `observe` per turn.

The catalog goes up as the narrowing's does (`uploads.plan_upload`, `uploads.put_catalog`):
descriptions clipped to the server's limit, in as many PUTs as its body limit takes. A tool the
server cannot hold (a name too long, a schema too deep) or refused is revealed by every search,
unranked, and a tool the ranking shows the server lacks (it answered fewer than asked) is
revealed beside the ranked ones: no catalog tool becomes unfindable because toolselect does not
know it.

Each search the model runs gets the server's `search_id`; the turn reports the id of the search
its first tool came from (the latest search that showed it, else the latest before the call),
every catalog tool it called, in order, and the outcome the host knows, so the server can tell
whether the model picked from what it was shown and learn from the tool that worked.

The adapters (`anthropic`, `openai`) only translate wire formats: the tools they declare, the
search calls they read and the answers they build.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

from toolselect.api.models import MAX_USED_TOOLS, UpsertResponse
from toolselect.client import AsyncClient, clip_text, recent_context
from toolselect.integrations.sessions import fit_session_id
from toolselect.integrations.uploads import ToolSpec, UploadPlan, plan_upload, put_catalog

# stdlib logging: this runs in the host's process and follows its logging setup.
log = logging.getLogger("toolselect.integrations")

SEARCH_TOOL = "toolselect_search"
SEARCH_DESCRIPTION = (
    "Search the available tools by what you need to do. Returns the tools that fit best, "
    "which you can then call. Use it whenever the tool you need is not loaded yet."
)
# Enough for a search to reveal alternatives without loading a large share of the catalog.
MAX_K = 20


def search_parameters(default_k: int) -> dict[str, Any]:
    """The JSON Schema of the search tool's input: a `query` and an optional `k`."""
    return {
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
                "description": f"How many tools to return (default {default_k}).",
            },
        },
        "required": ["query"],
    }


@dataclass(frozen=True, slots=True)
class Found:
    """What one search revealed: catalog tools, best first, and the server's id of that search
    (None when the search degraded to the catalog: toolselect showed nothing)."""

    tools: list[str]
    search_id: str | None = None


class CatalogSearch:
    """Ranks a fixed catalog (by name) through toolselect; never raises from `find`."""

    def __init__(
        self,
        client: AsyncClient,
        specs: Sequence[ToolSpec],
        *,
        name: str = SEARCH_TOOL,
        k: int = 5,
        pack: str | None = None,
        agent_id: str | None = None,
        fallback_limit: int | None = None,
    ) -> None:
        names = [spec.name for spec in specs]
        if name in names:
            raise ValueError(f"expected a search tool name not in the catalog, got {name!r}")
        self.client = client
        self.specs = list(specs)
        self.names = names
        self.name = name
        self.k = k
        self.pack = pack
        self.agent_id = agent_id
        self.fallback_limit = fallback_limit
        # The tools the server refused at the last upload (a limit configured lower).
        self.refused: frozenset[str] = frozenset()
        self._unknown_logged = False

    @functools.cached_property
    def plan(self) -> UploadPlan:
        """The catalog as the server can hold it (one pass over it, made on first use)."""
        return plan_upload(self.specs)

    @property
    def unranked(self) -> frozenset[str]:
        """The catalog tools the server cannot hold or refused: every search reveals them."""
        return self.plan.left_out | self.refused

    async def upload(self) -> UpsertResponse | Literal[False]:
        """Put the catalog into toolselect (under `pack`; see the module's docstring); unchanged
        tools cost nothing. When toolselect cannot take it (down, refusing), one
        `toolselect_upload_failed` line and False: the host goes on, and its searches reveal
        the catalog until toolselect knows it."""
        try:
            done = await put_catalog(self.client, self.plan, self.pack)
        except Exception as exc:  # the host's start-up must not fail over toolselect either
            log.warning(
                "toolselect_upload_failed",
                extra={"error": f"{type(exc).__name__}: {exc}", "tools": len(self.specs)},
            )
            return False
        self.refused = done.refused
        return UpsertResponse(upserted=done.upserted, unchanged=done.unchanged)

    async def find(
        self,
        query: str,
        k: int,
        *,
        session_id: str | None = None,
        context: Sequence[str] | None = None,
    ) -> Found:
        """The `k` best catalog tools for `query` with the search's id, then the tools it cannot
        rank (see the module's docstring); or the catalog's first `fallback_limit` (all by
        default) when toolselect cannot answer. `session_id` and `context` (earlier messages,
        most recent last) are the conversation's, when known."""
        unranked = self.unranked
        always = [n for n in self.names if n in unranked]
        rankable = [n for n in self.names if n not in unranked]
        want = min(k, len(rankable))
        if want < 1:
            return Found(always)  # nothing to rank: no search to report
        try:
            ranking = await self.client.rank(
                clip_text(query),  # a longer one would be refused: the search would degrade
                want,
                tools=rankable,
                session_id=fit_session_id(session_id),  # a longer one would be refused
                context=recent_context(context) or None,
            )
            asked = set(rankable)
            found = [r.tool for r in ranking.results if r.tool in asked]
            if not found:
                raise LookupError("toolselect knows none of the catalog's tools (not uploaded?)")
        except Exception as exc:
            # Any failure, ours included: the contract is that the host's loop never breaks.
            revealed = self.names[: self.fallback_limit]
            log.warning(
                "toolselect_search_degraded",
                extra={"error": f"{type(exc).__name__}: {exc}", "revealed": len(revealed)},
            )
            return Found(revealed)
        return Found([*found, *self._unknown(found, want, rankable), *always], ranking.search_id)

    def _unknown(self, found: list[str], want: int, rankable: list[str]) -> list[str]:
        """The catalog tools the server lacks when it ranked fewer than asked (it ranks all it
        holds): deleted there, a store reset, an upload that failed. Up to `fallback_limit`."""
        if len(found) >= want:
            return []
        shown = set(found)
        unknown = [n for n in rankable if n not in shown][: self.fallback_limit]
        if unknown and not self._unknown_logged:
            self._unknown_logged = True
            few = {"count": len(unknown), "names": unknown[:5]}
            log.info("toolselect_tools_unknown", extra={"agent": self.agent_id, **few})
        return unknown

    def arguments(self, given: object, request: str) -> tuple[str, int]:
        """The search call's query (the user's request when blank) and `k` (within 1..MAX_K)."""
        args = given if isinstance(given, Mapping) else {}
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            query = request
        k = args.get("k")
        if not isinstance(k, int) or isinstance(k, bool):
            k = self.k
        return query, max(1, min(k, MAX_K))


class TurnReport:
    """One user request: notes the searches the model runs and the catalog tools it calls, in
    order (the first is the one the request was routed to; later calls follow the tools'
    results), and reports them once, at `finish`.

    Set `outcome` (`ok`, `error`, `corrected`) when the host learns how the tool call went; a
    turn left by an exception reports `error`. `session_id` names the conversation and
    `context` holds its earlier user messages (oldest first): both go with the searches, so
    toolselect can weigh the session's previous tools and the context in."""

    def __init__(
        self,
        search: CatalogSearch,
        request: str,
        *,
        session_id: str | None = None,
        context: Sequence[str] | None = None,
    ) -> None:
        self.search = search
        self.request = request
        self.session_id = session_id
        self.context = list(context or ())
        self.turn_id = uuid.uuid4().hex
        self.used_tools: list[str] = []
        self.searches: list[Found] = []
        # The search the first used tool came from (None: no search showed it, or it degraded).
        self.search_id: str | None = None
        self.outcome: str | None = None
        self._reported = False

    @property
    def used_tool(self) -> str | None:
        """The first catalog tool the model called, if any."""
        return self.used_tools[0] if self.used_tools else None

    async def find(self, given: object) -> list[str]:
        """Run the search call with arguments `given` (see `CatalogSearch.arguments`); the tools
        to reveal. The search is remembered for the report."""
        query, k = self.search.arguments(given, self.request)
        found = await self.search.find(query, k, session_id=self.session_id, context=self.context)
        self.searches.append(found)
        return found.tools

    def called(self, name: str) -> None:
        if name == self.search.name or name in self.used_tools:
            return
        if not self.used_tools:
            self.search_id = _routed_by(self.searches, name)
        if len(self.used_tools) < MAX_USED_TOOLS:
            self.used_tools.append(name)

    def finish(self, outcome: str | None = None) -> str | None:
        """Report the tools used (once; a turn that called none reports nothing), with the
        search id and `outcome` (else the `outcome` attribute); the first tool's name."""
        if not self._reported and self.used_tool is not None:
            self._reported = True
            self.search.client.observe(
                clip_text(self.request),
                self.used_tool,
                turn_id=self.turn_id,
                agent_id=self.search.agent_id,
                pack=self.search.pack,
                outcome=outcome or self.outcome,
                search_id=self.search_id,
                used_tools=self.used_tools if len(self.used_tools) > 1 else None,
                session_id=fit_session_id(self.session_id),  # a longer one loses the turn
            )
        return self.used_tool

    def __enter__(self) -> TurnReport:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish("error" if exc is not None else None)


def _routed_by(searches: Sequence[Found], name: str) -> str | None:
    """The id of the search a tool was picked from: the latest that showed it, else the latest
    (the model called a tool it was not shown)."""
    for found in reversed(searches):
        if name in found.tools:
            return found.search_id
    return searches[-1].search_id if searches else None
