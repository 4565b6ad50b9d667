"""The learner: a non-blocking `observe()` in front of a bounded queue, and the intake worker.

`observe()` only appends to a bounded deque under a lock and wakes the worker; it never embeds,
ranks, or touches the store or the network, and it is safe from the event loop and from any
thread. A full queue drops the turn and counts it.

The intake worker takes batches: embeds the requests in one call, ranks each (top-1, margin),
runs the detector, records every turn (flagged or not, so analytics have denominators), and
labels flagged turns through the oracle tiers. Ratchet and ranker labels are decided inline;
teacher escalations run as separate tasks (bounded) so a slow teacher never stalls intake.
A saved exemplar is handed to `on_saved`, which folds it into the ranker at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import numpy as np
import structlog

from toolselect.embed import Embedder
from toolselect.errors import NotFound, ToolselectError
from toolselect.graph.store import Exemplar, Store, Tier, Turn
from toolselect.learn.detect import RankSignal, detect
from toolselect.metrics import Metrics
from toolselect.names import normalise_query
from toolselect.oracle.base import Candidate
from toolselect.oracle.oracle import InFlight, Oracle
from toolselect.oracle.tiers import plan
from toolselect.ranker import CentroidRanker, Ranking

log = structlog.get_logger("toolselect.learn")


@dataclass(frozen=True, slots=True)
class Observation:
    """One reported turn, as handed to `observe()`."""

    request: str
    used_tool: str
    turn_id: str
    at: datetime
    agent_id: str | None = None
    pack: str | None = None
    outcome: str | None = None


@dataclass(frozen=True, slots=True)
class LearnerConfig:
    fallback_tools: Collection[str]
    margin_floor: float = 0.05
    tiers: Sequence[str] = ("ratchet", "ranker", "teacher")
    queue_size: int = 1024
    batch_size: int = 64
    teacher_candidates: int = 10
    teacher_concurrency: int = 4


@dataclass
class _Stats:
    batches: int = 0
    processed: int = 0
    saved: int = 0
    errors: int = 0
    in_progress: int = field(default=0)


class Learner:
    """Observe turns, detect mis-routes, label them and save exemplars; see the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        embedder: Embedder,
        ranker: CentroidRanker,
        oracle: Oracle,
        on_saved: Callable[[Sequence[Exemplar]], Awaitable[None]],
        describe: Callable[[str], str],
        config: LearnerConfig,
        metrics: Metrics | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._ranker = ranker
        self._oracle = oracle
        self._on_saved = on_saved
        self._describe = describe
        self.config = config
        self._metrics = metrics or Metrics()
        self._clock = clock
        self._queue: deque[Observation] = deque()
        self._lock = threading.Lock()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: asyncio.Task[None] | None = None
        self._teaching: set[asyncio.Task[None]] = set()
        self._teacher_slots = asyncio.Semaphore(config.teacher_concurrency)
        self._in_flight = InFlight()
        self._accepting = False
        self.stats = _Stats()

    # -- intake ------------------------------------------------------------------------------

    def observe(
        self,
        request: str,
        used_tool: str,
        *,
        turn_id: str | None = None,
        agent_id: str | None = None,
        pack: str | None = None,
        outcome: str | None = None,
    ) -> bool:
        """Queue a turn for the worker and return at once: True when queued, False when dropped."""
        if not self._accepting:
            self._metrics.dropped.labels("closed").inc()
            return False
        observation = Observation(
            request=request,
            used_tool=used_tool,
            turn_id=turn_id or uuid.uuid4().hex,
            at=self._clock(),
            agent_id=agent_id,
            pack=pack,
            outcome=outcome,
        )
        with self._lock:
            if len(self._queue) >= self.config.queue_size:
                self._metrics.dropped.labels("queue_full").inc()
                return False
            self._queue.append(observation)
            depth = len(self._queue)
        self._metrics.observed.inc()
        self._metrics.queue_depth.set(depth)
        self._signal()
        return True

    def _signal(self) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake.set()
        else:
            loop.call_soon_threadsafe(self._wake.set)

    @property
    def depth(self) -> int:
        return len(self._queue)

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self) -> None:
        """Accept turns into the queue (the worker may start later, once the catalog loads)."""
        self._loop = asyncio.get_running_loop()
        self._accepting = True

    def start(self) -> None:
        """Accept turns and start the intake worker on the running loop."""
        if self._worker is not None:
            return
        self.open()
        self._worker = asyncio.create_task(self._run(), name="toolselect-learner-intake")

    async def drain(self, within_s: float) -> bool:
        """Wait until the queue is empty and no batch or teacher call is in progress."""

        async def settled() -> None:
            while self._queue or self.stats.in_progress or self._teaching:
                self._idle.clear()
                if self._teaching:
                    await asyncio.wait(set(self._teaching), timeout=0.05)
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._idle.wait(), 0.05)

        try:
            await asyncio.wait_for(settled(), within_s)
        except TimeoutError:
            return False
        return True

    async def close(self, within_s: float = 10.0) -> None:
        """Stop intake, drain within `within_s`, cancel teacher calls, join every task."""
        self._accepting = False
        drained = await self.drain(within_s) if self._worker is not None else True
        left = len(self._queue)
        if not drained:
            log.warning("learner_drain_timeout", left=left, teaching=len(self._teaching))
            if left:
                self._metrics.dropped.labels("shutdown").inc(left)
        tasks = [*self._teaching]
        if self._worker is not None:
            tasks.append(self._worker)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._worker = None
        self._teaching.clear()
        self._queue.clear()
        self._metrics.queue_depth.set(0)

    # -- worker ------------------------------------------------------------------------------

    def _take(self) -> list[Observation]:
        with self._lock:
            count = min(len(self._queue), self.config.batch_size)
            batch = [self._queue.popleft() for _ in range(count)]
            depth = len(self._queue)
        self._metrics.queue_depth.set(depth)
        return batch

    async def _run(self) -> None:
        while True:
            if not self._queue:
                self._idle.set()
                await self._wake.wait()
                self._wake.clear()
                continue
            batch = self._take()
            self.stats.in_progress += 1
            try:
                await self._process(batch)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.stats.errors += 1
                log.exception("intake_batch_failed", turns=len(batch))
            finally:
                self.stats.in_progress -= 1
                self.stats.batches += 1
                self.stats.processed += len(batch)

    async def _process(self, batch: Sequence[Observation]) -> None:
        vectors = await self._embedder.embed([o.request for o in batch])
        turns: list[Turn] = []
        escalations: list[tuple[Turn, np.ndarray, Ranking]] = []
        saves: list[tuple[Turn, np.ndarray, str, Tier, float]] = []
        for obs, vector in zip(batch, vectors, strict=True):
            ranking = self._rank(vector, obs.pack)
            signal = (
                RankSignal(ranking.results[0].tool, ranking.margin) if ranking.results else None
            )
            turn = Turn(
                id=obs.turn_id,
                request=obs.request,
                used_tool=obs.used_tool,
                at=obs.at,
                agent_id=obs.agent_id,
                pack=obs.pack,
                outcome=obs.outcome,
                top1=signal.top1 if signal else None,
                margin=signal.margin if signal else None,
            )
            flag = detect(
                obs.request,
                obs.used_tool,
                signal,
                fallback_tools=self.config.fallback_tools,
                margin_floor=self.config.margin_floor,
            )
            if flag is None:
                turns.append(turn)
                continue
            self._metrics.flags.labels(flag.reason).inc()
            existing = await self._store.exemplar_for_query(obs.request)
            decision = plan(
                flag,
                obs.outcome,
                signal,
                margin_floor=self.config.margin_floor,
                ratchet_label=existing.tool if existing else None,
                tiers=self.config.tiers,
            )
            turn = replace(turn, flagged=True, flag_reason=flag.reason, tier=decision.tier)
            if decision.escalate:
                escalations.append((turn, vector, ranking))
            elif decision.label is not None:
                turn = replace(turn, label=decision.label, result="labeled")
                if decision.tier == "ranker":
                    saves.append((turn, vector, decision.label, "ranker", ranking.margin))
                self._decided(turn)
            else:
                turn = replace(turn, result="declined")
                self._decided(turn)
            turns.append(turn)
        await self._store.record_turns(turns)
        saved = [
            exemplar
            for turn, vector, label, tier, confidence in saves
            if (exemplar := await self._save(turn, vector, label, tier, confidence)) is not None
        ]
        if saved:  # one fold per batch: a fold swaps the ranker's matrix
            await self._on_saved(saved)
        for turn, vector, ranking in escalations:
            self._escalate(turn, vector, ranking)

    def _rank(self, vector: np.ndarray, pack: str | None) -> Ranking:
        k = max(2, self.config.teacher_candidates)
        if pack:
            in_pack = self._ranker.rank(vector, k, pack=pack)
            if in_pack.results:
                return in_pack
        return self._ranker.rank(vector, k)

    def _decided(self, turn: Turn) -> None:
        self._metrics.decisions.labels(turn.tier or "none", turn.result or "none").inc()

    async def _save(
        self, turn: Turn, vector: np.ndarray, label: str, tier: Tier, confidence: float
    ) -> Exemplar | None:
        """Save a label; the exemplar when the store changed, else None."""
        exemplar = Exemplar(
            id=uuid.uuid4().hex,
            query=turn.request,
            tool=label,
            tier=tier,
            embedder=self._embedder.id,
            embedding=tuple(vector.tolist()),
            created_at=self._clock(),
            confidence=float(confidence),
            turn_id=turn.id,
        )
        try:
            changed = await self._store.save_exemplar(exemplar)
        except NotFound:
            log.info("label_for_unknown_tool", tool=label, turn_id=turn.id)
            return None
        if not changed:
            return None
        self.stats.saved += 1
        return exemplar

    # -- teacher tier ------------------------------------------------------------------------

    def _escalate(self, turn: Turn, vector: np.ndarray, ranking: Ranking) -> None:
        task = asyncio.create_task(self._teach(turn, vector, ranking), name=f"teach-{turn.id}")
        self._teaching.add(task)
        task.add_done_callback(self._teaching.discard)

    async def _teach(self, turn: Turn, vector: np.ndarray, ranking: Ranking) -> None:
        key = normalise_query(turn.request)
        if not self._in_flight.reserve(key):
            await self._finish(replace(turn, result="declined"), "query already being labelled")
            return
        try:
            async with self._teacher_slots:
                candidates = [Candidate(r.tool, self._describe(r.tool)) for r in ranking.results]
                answer = await self._oracle.teach(
                    turn.request, turn.used_tool, candidates, turn_id=turn.id
                )
            done = replace(turn, result=answer.result, label=answer.label)
            if answer.result == "labeled" and answer.label is not None:
                exemplar = await self._save(done, vector, answer.label, "teacher", 1.0)
                if exemplar is not None:
                    await self._on_saved([exemplar])
            await self._finish(done, answer.reason or answer.error)
        except ToolselectError as exc:
            await self._finish(replace(turn, result="error"), str(exc))
        finally:
            self._in_flight.release(key)

    async def _finish(self, turn: Turn, why: str | None) -> None:
        self._decided(turn)
        log.info(
            "turn_labelled",
            turn_id=turn.id,
            tier=turn.tier,
            result=turn.result,
            label=turn.label,
            why=why,
        )
        await self._store.record_turns([turn])
