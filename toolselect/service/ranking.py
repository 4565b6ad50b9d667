"""The ranking facade: top-k for a request and the PromptKit selection, from the ranker alone.

Ranking never reads the store: a query is embedded (through the recent-vector cache) and ranked
against the in-memory snapshot the live index keeps.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from toolselect.catalog import tool_text
from toolselect.config import Settings
from toolselect.embed import Embedder
from toolselect.errors import InvalidInput
from toolselect.metrics import Metrics
from toolselect.ranker import Ranking
from toolselect.records import Tool
from toolselect.selection import Selection, check_text, choose
from toolselect.service.index import LiveIndex
from toolselect.service.searches import SearchLog

_CANDIDATE_CACHE_SIZE = 10_000


@dataclass(frozen=True, slots=True)
class Search:
    """A ranking as answered to a caller, with the id a turn reports it by."""

    ranking: Ranking
    search_id: str


class RankingFacade:
    """`rank` and `select` with the service's limits (query size, k) and readiness."""

    def __init__(
        self,
        settings: Settings,
        index: LiveIndex,
        queries: Embedder,
        metrics: Metrics,
        searches: SearchLog,
    ) -> None:
        self._settings = settings
        self._ranker = index.ranker
        self._embedder = index.embedder
        self._check_ready = index.check_ready
        self._queries = queries
        self._metrics = metrics
        self._searches = searches
        self._candidate_vectors: OrderedDict[str, np.ndarray] = OrderedDict()

    @property
    def embedder_id(self) -> str:
        """The embedder the scores come from (part of every ranking answer)."""
        return self._embedder.id

    def check_query(self, text: str, field: str) -> None:
        check_text(text, field, self._settings.max_query_bytes)

    def check_k(self, k: int, field: str = "k") -> None:
        if not 1 <= k <= self._settings.max_k:
            raise InvalidInput(f"expected {field} in 1..{self._settings.max_k}, got {k}", field)

    async def rank(
        self,
        query: str,
        k: int = 5,
        *,
        tools: Sequence[str] | None = None,
        pack: str | None = None,
    ) -> Ranking:
        """Top-k tools for `query`, optionally restricted to names and/or a pack."""
        self.check_query(query, "query")
        self.check_k(k)
        self._check_ready()
        started = time.perf_counter()
        vector = (await self._queries.embed([query]))[0]
        ranking = self._ranker.rank(vector, k, restrict=tools, pack=pack)
        self._metrics.rank_latency.observe(time.perf_counter() - started)
        return ranking

    async def search(
        self,
        query: str,
        k: int = 5,
        *,
        tools: Sequence[str] | None = None,
        pack: str | None = None,
    ) -> Search:
        """`rank`, remembered under a new search id (what an agent is shown)."""
        ranking = await self.rank(query, k, tools=tools, pack=pack)
        return Search(ranking, self._searches.record(ranking.tools, pack))

    async def select(
        self, text: str, candidates: Sequence[Tool], k: int, *, pack: str | None = None
    ) -> Selection:
        """PromptKit selection: only candidate names, at most k, unknown ones ranked by text;
        remembered under a new search id."""
        self.check_query(text, "query.Text")
        self._check_ready()
        max_k = self._settings.max_k
        if not candidates:
            chosen = choose(self._ranker, np.zeros(0, np.float32), (), None, k, max_k)
        else:
            vector = (await self._queries.embed([text]))[0]
            unknown = [c for c in candidates if not self._ranker.has(c.name)]
            vectors = await self._candidate_matrix(unknown) if unknown else None
            chosen = choose(self._ranker, vector, candidates, vectors, k, max_k)
        return replace(chosen, search_id=self._searches.record(chosen.selected, pack))

    async def _candidate_matrix(self, tools: Sequence[Tool]) -> np.ndarray:
        """Vectors of tools not in the catalog, cached by content hash."""
        cache = self._candidate_vectors
        missing = [t for t in tools if t.content_hash not in cache]
        if missing:
            vectors = await self._embedder.embed([tool_text(t) for t in missing])
            for tool, vec in zip(missing, vectors, strict=True):
                cache[tool.content_hash] = vec
            while len(cache) > _CANDIDATE_CACHE_SIZE:
                cache.popitem(last=False)
        rows = []
        for tool in tools:
            cache.move_to_end(tool.content_hash)
            rows.append(cache[tool.content_hash])
        return np.vstack(rows)
