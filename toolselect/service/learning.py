"""The learning facade: turns in, human labels in, what the loop learned out."""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Unpack

from toolselect.analytics.surfaces import analysis_payload
from toolselect.catalog import check_tool_name
from toolselect.clock import Clock
from toolselect.embed import Embedder
from toolselect.errors import NotFound
from toolselect.keys import shown
from toolselect.learn.learner import Learner
from toolselect.learn.records import Observation, labelled_tool
from toolselect.learn.tuning import Tuner, fit_payload
from toolselect.metrics import Metrics
from toolselect.records import Exemplar, Turn
from toolselect.service.index import LiveIndex
from toolselect.service.ranking import RankingFacade
from toolselect.service.searches import Placement, SearchLog
from toolselect.service.sessions import SessionSignals
from toolselect.store.buffered import BufferedStore
from toolselect.store.port import lookup_one

# The turn ids observed lately, to know a resend at once (the learner knows it from the store).
RECENT_TURNS = 10_000

if TYPE_CHECKING:
    from toolselect.turns import ReportedTurn, TurnFields


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
        sessions: SessionSignals,
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
        self._sessions = sessions
        self._metrics = metrics
        self._recent_turns: OrderedDict[str, None] = OrderedDict()
        self._recent_lock = threading.Lock()

    def observe(
        self, request: str, used_tool: str | None = None, **turn: Unpack[TurnFields]
    ) -> bool:
        """Hand a turn to the learner; never blocks, never raises for a full queue.

        In process, the arguments are taken as typed; the HTTP, MCP and client boundaries
        validate a `ReportedTurn` and hand it to `report`. `used_tools` lists every tool of a
        turn that used several (`used_tool`, when absent, is the first of them); with
        `search_id` the turn is linked to what that search showed."""
        # A turn id this process saw lately is a resend: the learner skips it against the store
        # (`Labeller._fresh`); here it must not count its placement or note its session again.
        turn_id = turn.get("turn_id")
        again = self._seen_lately(turn_id)
        placement: Placement | None = None
        if search_id := turn.get("search_id"):
            used = labelled_tool(used_tool, turn.get("used_tools"))
            catalog = self._index.ranker.snapshot.names
            placement = self._searches.place(search_id, used, turn.get("pack"), catalog)
            if not again:
                self._metrics.searched_turns.labels(placement.status).inc()
        at = self._clock()
        queued = self._learner.offer(
            Observation.of(request, used_tool, turn, at=at)
            if placement is None
            else Observation.of(
                request,
                used_tool,
                turn,
                at=at,
                search_status=placement.status,
                shown=placement.shown,
                shown_position=placement.position,
                shown_k=placement.count,
            )
        )
        # A turn the full queue dropped is no part of its conversation either (nor remembered:
        # sent again, it is new).
        if not queued or again:
            return queued
        if turn_id:
            with self._recent_lock:
                self._recent_turns[turn_id] = None
                if len(self._recent_turns) > RECENT_TURNS:
                    self._recent_turns.popitem(last=False)
        if (session_id := turn.get("session_id")) is not None:
            self._sessions.note(
                session_id, turn.get("used_tools") or ((used_tool,) if used_tool else ()), at
            )
        return queued

    def _seen_lately(self, turn_id: str | None) -> bool:
        """Whether `turn_id` was queued here among the last `RECENT_TURNS` turn ids."""
        if not turn_id:
            return False
        with self._recent_lock:
            return turn_id in self._recent_turns

    def report(self, turn: ReportedTurn) -> bool:
        """`observe` for a turn validated at a boundary (`toolselect.turns.turn_problem`)."""
        return self.observe(turn.request, turn.used_tool, **turn.fields())

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
        check_tool_name(tool, "tool")  # "" is no tool anybody has: a mistake, not a 404
        # Before the catalog is loaded every tool is unknown: 503, which a client retries,
        # not a 404 that would lose the label.
        self._index.check_ready()
        if not self._index.ranker.has(tool) and not (
            await self._index.catch_up() and self._index.ranker.has(tool)
        ):
            raise NotFound(f"no tool named {shown(tool)}", "tool")
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
        if result.unknown_tool:  # deleted through another replica since this one polled
            raise NotFound(f"no tool named {shown(tool)}", "tool")
        await self._index.saved(result)
        stored = await lookup_one(self._store, query)
        return bool(result.changed), stored or exemplar

    async def delete_exemplar(self, exemplar_id: str) -> None:
        if not await self._store.delete_exemplar(exemplar_id):
            raise NotFound(f"no exemplar with id {shown(exemplar_id)}", "id")
        await self._index.fold_since(self._index.exemplar_version)

    async def settle(self) -> None:
        """Wait for a refit the latest labels started (the CLI, before it prints the fit)."""
        await self._tuner.settle()

    def fit(self) -> dict[str, object]:
        """What the tuner chose and why (`GET /v1/analytics/learning`)."""
        payload = fit_payload(self._tuner.current, pinned_floor=self._pinned_floor)
        payload["conversation"] = self._sessions.payload()
        return payload

    async def analysis(self, name: str, since: str | None) -> dict[str, Any]:
        """One store analysis as the API serves it; NotFound or InvalidInput for bad names."""
        return await analysis_payload(self._store, name, since)
