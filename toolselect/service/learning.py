"""The learning facade: turns in, human labels in, what the loop learned out."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from toolselect.analytics.surfaces import analysis_payload
from toolselect.clock import Clock
from toolselect.embed import Embedder
from toolselect.errors import NotFound
from toolselect.graph.buffered import BufferedStore
from toolselect.graph.store import Exemplar, Turn
from toolselect.learn.learner import Learner
from toolselect.learn.records import Observation
from toolselect.learn.tuning import Tuner, fit_payload
from toolselect.metrics import Metrics
from toolselect.service.index import LiveIndex
from toolselect.service.ranking import RankingFacade
from toolselect.service.searches import SearchLog


class LearningFacade:
    """Observe turns (never blocking), take feedback, delete labels, report the fit."""

    def __init__(
        self,
        store: BufferedStore,
        index: LiveIndex,
        learner: Learner,
        tuner: Tuner,
        queries: Embedder,
        ranking: RankingFacade,
        clock: Clock,
        searches: SearchLog,
        metrics: Metrics,
        *,
        pinned_floor: bool,
    ) -> None:
        self._store = store
        self._index = index
        self._learner = learner
        self._tuner = tuner
        self._queries = queries
        self._ranking = ranking
        self._clock = clock
        self._pinned_floor = pinned_floor
        self._searches = searches
        self._metrics = metrics

    def observe(
        self,
        request: str,
        used_tool: str,
        *,
        turn_id: str | None = None,
        agent_id: str | None = None,
        pack: str | None = None,
        outcome: str | None = None,
        session_id: str | None = None,
        used_tools: Sequence[str] = (),
        search_id: str | None = None,
    ) -> bool:
        """Hand a turn to the learner; never blocks, never raises for a full queue.

        `used_tools` lists every tool of a turn that used several (`used_tool`, when empty, is
        the first of them); with `search_id` the turn is linked to what that search showed."""
        tools = tuple(used_tools)
        used = used_tool or (tools[0] if tools else "")
        placement = None
        if search_id:
            placement = self._searches.place(search_id, used, pack)
            self._metrics.searched_turns.labels(placement.status).inc()
        return self._learner.offer(
            Observation(
                request=request,
                used_tool=used,
                turn_id=turn_id or uuid.uuid4().hex,
                at=self._clock(),
                agent_id=agent_id,
                pack=pack,
                outcome=outcome,
                session_id=session_id,
                used_tools=tools if len(tools) > 1 else (),
                search_id=search_id,
                search_status=placement.status if placement else None,
                shown=placement.shown if placement else (),
                shown_position=placement.position if placement else None,
            )
        )

    async def turn_when_done(self, turn_id: str, timeout_s: float) -> Turn | None:
        """The stored turn once the learner has worked through its queue (or `timeout_s`)."""
        await self._learner.drain(timeout_s)
        return await self._store.get_turn(turn_id)

    async def feedback(self, query: str, tool: str) -> tuple[bool, Exemplar]:
        """Record a human-confirmed label (tier `feedback`): never expired, evicted or overridden.

        Returns whether the store changed (False: the same label was already there) and the
        label the store now holds for `query`.
        """
        self._ranking.check_query(query, "query")
        if not self._index.ranker.has(tool):
            raise NotFound(f"no tool named {tool!r}", "tool")
        vector = (await self._queries.embed([query]))[0]
        exemplar = Exemplar(
            id=uuid.uuid4().hex,
            query=query,
            tool=tool,
            tier="feedback",
            embedder=self._queries.id,
            embedding=tuple(vector.tolist()),
            created_at=self._clock(),
        )
        result = await self._store.save_exemplars([exemplar])
        if result.unknown_tool:
            raise NotFound(f"unknown tool {tool!r}", "tool")
        await self._index.saved(result)
        stored = await self._store.exemplar_for_query(query)
        return bool(result.changed), stored or exemplar

    async def delete_exemplar(self, exemplar_id: str) -> None:
        if not await self._store.delete_exemplar(exemplar_id):
            raise NotFound(f"no exemplar with id {exemplar_id!r}")
        await self._index.fold_since(self._index.exemplar_version)

    async def settle(self) -> None:
        """Wait for a refit the latest labels started (the CLI, before it prints the fit)."""
        await self._tuner.settle()

    def fit(self) -> dict[str, object]:
        """What the tuner chose and why (`GET /v1/analytics/learning`)."""
        return fit_payload(self._tuner.current, pinned_floor=self._pinned_floor)

    async def analysis(self, name: str, since: str | None) -> dict[str, Any]:
        """One store analysis as the API serves it; NotFound or InvalidInput for bad names."""
        return await analysis_payload(self._store, name, since)
