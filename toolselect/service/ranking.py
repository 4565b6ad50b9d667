"""The ranking facade: top-k for a request and the PromptKit selection, from the ranker alone.

Ranking never reads the store: a query is embedded (through the recent-vector cache) and ranked
against the in-memory snapshot the live index keeps. A request that says where it stands in a
conversation (`Conversation`) gets the conversation signals at their fitted weights
(`service/sessions.py`): zero until the store's sessions show they help.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from toolselect.catalog import check_pack, check_session_id, tool_text
from toolselect.config import (
    DEFAULT_K,
    MAX_COMPANIONS,
    MAX_CONTEXT_MESSAGES,
    MAX_PREVIOUS_TOOLS,
    Settings,
)
from toolselect.embed import Embedder
from toolselect.errors import InvalidInput
from toolselect.keys import shown as echoed
from toolselect.learn.session_fit import SessionWeights
from toolselect.metrics import Metrics
from toolselect.names import CatalogNames
from toolselect.ranker import Ranking
from toolselect.ranker.relations import Companion
from toolselect.records import Tool
from toolselect.selection import Selection, check_text, choose
from toolselect.service.index import LiveIndex
from toolselect.service.searches import SearchLog
from toolselect.service.sessions import SessionSignals

CANDIDATE_CACHE_SIZE = 10_000


@dataclass(frozen=True, slots=True)
class Conversation:
    """Where a request stands in a conversation: its session, the tools used before it (given,
    or the session's last turn noted here), the earlier messages (most recent last), and how
    many companions the caller accepts beside the top k."""

    session_id: str | None = None
    previous_tools: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    companions: int = 0


ALONE = Conversation()


@dataclass(frozen=True, slots=True)
class Search:
    """A ranking as answered to a caller, with the id a turn reports it by."""

    ranking: Ranking
    search_id: str
    companions: tuple[Companion, ...] = field(default=())


class RankingFacade:
    """`rank` and `select` with the service's limits (query size, k) and readiness."""

    def __init__(
        self,
        settings: Settings,
        index: LiveIndex,
        queries: Embedder,
        metrics: Metrics,
        searches: SearchLog,
        sessions: SessionSignals,
    ) -> None:
        self._settings = settings
        self._ranker = index.ranker
        self._embedder = index.embedder
        self._check_ready = index.check_ready
        self._queries = queries
        self._metrics = metrics
        self._searches = searches
        self._sessions = sessions
        self._candidate_vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._catalog: tuple[tuple[str, ...], CatalogNames] = ((), CatalogNames(()))

    @property
    def embedder_id(self) -> str:
        """The embedder the scores come from (part of every ranking answer)."""
        return self._embedder.id

    def _previous(self, conversation: Conversation) -> tuple[str, ...]:
        """The tools used earlier in the conversation (given, else the session's remembered),
        each as the catalog tool it stands for: the relations count catalog tools, and agents
        may report `mcp__server__tool` for the catalog's `server__tool`."""
        reported = conversation.previous_tools or self._sessions.previous(conversation.session_id)
        if not reported:
            return ()
        names = self._ranker.snapshot.names
        cached, catalog = self._catalog
        if cached is not names:  # a fold keeps the names: rebuilt when the catalog changes
            catalog = CatalogNames(names)
            self._catalog = (names, catalog)
        return tuple(catalog.resolve(name) or name for name in reported)

    def check_query(self, text: str, field: str) -> None:
        check_text(text, field, self._settings.max_query_bytes)

    def check_k(self, k: int, field: str = "k") -> None:
        if not 1 <= k <= self._settings.max_k:
            raise InvalidInput(
                f"expected {field} in 1..{self._settings.max_k}, got {echoed(k)}", field
            )

    def check_conversation(self, conversation: Conversation) -> None:
        check_session_id(conversation.session_id)  # "" is none; " " a mistake
        if not 0 <= conversation.companions <= MAX_COMPANIONS:
            raise InvalidInput(
                f"expected companions in 0..{MAX_COMPANIONS}, got {echoed(conversation.companions)}",
                "companions",
            )
        if len(conversation.context) > MAX_CONTEXT_MESSAGES:
            raise InvalidInput(
                f"expected at most {MAX_CONTEXT_MESSAGES} context messages, "
                f"got {len(conversation.context)}",
                "context",
            )
        for i, message in enumerate(conversation.context):
            self.check_query(message, f"context[{i}]")
        if len(conversation.previous_tools) > MAX_PREVIOUS_TOOLS:
            raise InvalidInput(
                f"expected at most {MAX_PREVIOUS_TOOLS} previous_tools, "
                f"got {len(conversation.previous_tools)}",
                "previous_tools",
            )

    async def rank(
        self,
        query: str,
        k: int = 5,
        *,
        tools: Sequence[str] | None = None,
        pack: str | None = None,
    ) -> Ranking:
        """Top-k tools for `query`, optionally restricted to names and/or a pack."""
        ranking, _ = await self._rank(query, k, tools, pack, ALONE)
        return ranking

    async def _rank(
        self,
        query: str,
        k: int,
        tools: Sequence[str] | None,
        pack: str | None,
        conversation: Conversation,
    ) -> tuple[Ranking, tuple[Companion, ...]]:
        self.check_query(query, "query")
        self.check_k(k)
        pack = check_pack(pack)  # "" is none; a blank one or 257 characters a mistake
        self.check_conversation(conversation)
        self._check_ready()
        started = time.perf_counter()
        weights = self._sessions.weights
        context = conversation.context[-1:] if weights.context > 0 else ()
        vectors = await self._queries.embed([query, *context])
        vector = vectors[0]
        # Only where the message alone is uncertain (the fitted margin gate).
        if context and weights.uses_context(
            lambda: self._ranker.rank(vector, k, restrict=tools, pack=pack).margin
        ):
            vector = (vector + weights.context * vectors[1]) / (1.0 + weights.context)
        previous = self._previous(conversation)
        prior = None
        if weights.prior > 0 and previous:
            prior = self._sessions.relations.prior(previous)
        ranking = self._ranker.rank(
            vector, k, restrict=tools, pack=pack, prior=prior, prior_weight=weights.prior
        )
        companions = self._companions(
            ranking.tools, conversation, lambda: self._ranker.allowed(tools, pack), previous
        )
        self._metrics.rank_latency.observe(time.perf_counter() - started)
        return ranking, companions

    def _companions(
        self,
        ranked: Sequence[str],
        conversation: Conversation,
        allowed: Callable[[], Collection[str]],
        previous: Sequence[str],
    ) -> tuple[Companion, ...]:
        """The companions a caller asked for, among the `allowed` names (built only then)."""
        least = self._sessions.weights.companion_share
        if not conversation.companions or least is None:
            return ()
        names = allowed()
        found = self._sessions.relations.companions(
            ranked, conversation.companions, least, names.__contains__, previous
        )
        self._metrics.companions_offered.inc(len(found))
        return tuple(found)

    async def search(
        self,
        query: str,
        k: int | None = None,
        *,
        tools: Sequence[str] | None = None,
        pack: str | None = None,
        conversation: Conversation = ALONE,
    ) -> Search:
        """`rank` with the conversation signals, remembered under a new search id (what an
        agent is shown: the ranked tools, then the companions); `k` by default `DEFAULT_K`, or
        `TOOLSELECT_MAX_K` when that is lower."""
        k = min(DEFAULT_K, self._settings.max_k) if k is None else k
        ranking, companions = await self._rank(query, k, tools, pack, conversation)
        shown = (*ranking.tools, *(c.tool for c in companions))
        return Search(ranking, self._searches.record(shown, pack), companions)

    async def select(
        self,
        text: str,
        candidates: Sequence[Tool],
        k: int,
        *,
        pack: str | None = None,
        conversation: Conversation = ALONE,
    ) -> Selection:
        """PromptKit selection: only candidate names, at most k, unknown ones ranked by text,
        with the conversation signals as `search` uses them (companions among the candidates);
        remembered under a new search id (what was shown: the chosen, then the companions)."""
        self.check_query(text, "query.Text")
        pack = check_pack(pack, "query.PackID")
        self.check_conversation(conversation)
        self._check_ready()
        weights = self._sessions.weights
        previous = self._previous(conversation)
        if not candidates:
            empty = np.zeros(0, np.float32)
            chosen = choose(self._ranker, empty, (), None, k, self._settings.max_k)
        else:
            chosen = await self._choose(
                text, candidates, k, conversation.context, previous, weights
            )
        companions = self._companions(
            chosen.selected, conversation, lambda: {c.name for c in candidates}, previous
        )
        shown = (*chosen.selected, *(c.tool for c in companions))
        search_id = self._searches.record(shown, pack)
        return replace(chosen, search_id=search_id, companions=companions)

    async def _choose(
        self,
        text: str,
        candidates: Sequence[Tool],
        k: int,
        context: Sequence[str],
        previous: Sequence[str],
        weights: SessionWeights,
    ) -> Selection:
        """`choose` with the session prior, and the context mixed into the query where the
        message alone is uncertain among the candidates (as `_rank` mixes them)."""
        max_k = self._settings.max_k
        mixed = context[-1:] if weights.context > 0 else ()
        vectors = await self._queries.embed([text, *mixed])
        unknown = [c for c in candidates if not self._ranker.has(c.name)]
        matrix = await self._candidate_matrix(unknown) if unknown else None
        vector = vectors[0]
        if mixed and weights.uses_context(
            lambda: choose(self._ranker, vector, candidates, matrix, k, max_k).margin
        ):
            vector = (vector + weights.context * vectors[1]) / (1.0 + weights.context)
        prior = None
        if weights.prior > 0 and previous:
            prior = self._sessions.relations.prior(previous)
        return choose(
            self._ranker,
            vector,
            candidates,
            matrix,
            k,
            max_k,
            prior=prior,
            prior_weight=weights.prior,
        )

    async def _candidate_matrix(self, tools: Sequence[Tool]) -> np.ndarray:
        """Vectors of tools not in the catalog, cached by content hash (least recently used out).

        The rows are gathered before the cache is trimmed: a request may bring more new
        candidates than the cache holds, and another request may trim it while this one embeds.
        """
        cache = self._candidate_vectors
        # Each hash once: a hash is canonical JSON and SHA-256, on the selection's path.
        digests = [t.content_hash for t in tools]
        found = {d: cache[d] for d in digests if d in cache}
        missing = [(d, t) for d, t in zip(digests, tools, strict=True) if d not in found]
        if missing:
            vectors = await self._embedder.embed([tool_text(t) for _, t in missing])
            found.update(zip((d for d, _ in missing), vectors, strict=True))
        for digest, vector in found.items():
            cache[digest] = vector
            cache.move_to_end(digest)
        while len(cache) > CANDIDATE_CACHE_SIZE:
            cache.popitem(last=False)
        return np.vstack([found[d] for d in digests])
