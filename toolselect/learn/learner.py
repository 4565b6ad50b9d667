"""The learner: a non-blocking `observe()` in front of a bounded queue, and the intake worker.

`observe()` only appends to a bounded deque under a lock and wakes the worker; it never embeds,
ranks, or touches the store or the network, and it is safe from the event loop and from any
thread. A full queue drops the turn and counts it.

The intake worker takes what is queued (up to `batch_size`) and per batch: embeds the requests
in one call, ranks them on one snapshot (top-1, margin), runs the detector, looks up the
ratchet labels of all flagged turns in one store call, records every turn in one call (flagged
or not, so analytics have denominators), saves the batch's labels in one call and folds them
once. With `overlap_writes` (a store in another process) the next batch is taken, embedded and
ranked (in a worker thread) while this one is written; the store work itself stays strictly
batch after batch (ratchet lookup, record, save, fold), so each batch's lookup sees what the
batches before it saved, and a batch ranked on a snapshot that a fold has since replaced is
ranked again before it is written. A batch that fails for a reason other than an unreachable
store is retried turn by turn, so a turn that cannot be processed is counted and logged alone
and the others are recorded.
Ratchet and ranker labels are decided inline; teacher escalations run as separate tasks
(bounded) so a slow teacher never stalls intake; the turns they finish meanwhile are recorded
together. When no paid call can happen (kill switch, or no teacher) an escalation is declined
inline and its turn recorded once, with its batch.
A save's result is handed to `on_saved`, which folds its exemplars into the ranker at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np
import structlog

from toolselect.clock import Clock, utc_now
from toolselect.embed import Embedder
from toolselect.errors import StoreUnavailable, ToolselectError
from toolselect.graph.store import Exemplar, SaveResult, Store, Tier, Turn
from toolselect.learn.detect import Flag, RankSignal, detect
from toolselect.learn.fit import within_budget
from toolselect.learn.tuning import Tuner
from toolselect.metrics import Metrics
from toolselect.names import normalise_query
from toolselect.oracle.base import Candidate, estimated_tokens
from toolselect.oracle.oracle import InFlight, Oracle
from toolselect.oracle.tiers import plan
from toolselect.ranker import CentroidRanker, Ranking, Snapshot

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
    """`margin_floor` and `teacher_candidates` apply when no `Tuner` is given (a tuner's fit
    decides them otherwise); the teacher sees the whole catalog (or pack) up to
    `teacher_full_catalog` tools, and never more candidates than `teacher_max_input_tokens` buy."""

    fallback_tools: Collection[str]
    margin_floor: float = 0.05
    tiers: Sequence[str] = ("ratchet", "ranker", "teacher")
    queue_size: int = 1024
    # A burst is recorded in few store transactions: the worker takes what is queued, up to this.
    batch_size: int = 512
    teacher_candidates: int = 30
    teacher_full_catalog: int = 50
    teacher_max_input_tokens: int = 6000
    teacher_concurrency: int = 4
    # Embed and rank the next batch while this one is written: a gain when the store's work
    # runs in another process (Neo4j); with SQLite in this process the two threads only contend
    # for the GIL, which measured ~13% slower unflagged intake.
    overlap_writes: bool = False


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A batch ranked and checked on one snapshot, ready for the store."""

    batch: Sequence[Observation]
    vectors: np.ndarray
    snapshot: Snapshot
    floor: float
    rankings: list[Ranking]
    signals: list[RankSignal | None]
    flags: list[Flag | None]


@dataclass
class _Stats:
    batches: int = 0
    processed: int = 0
    saved: int = 0
    errors: int = 0
    failed_turns: int = 0
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
        on_saved: Callable[[SaveResult], Awaitable[None]],
        describe: Callable[[str], str],
        config: LearnerConfig,
        tuner: Tuner | None = None,
        metrics: Metrics | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self._tuner = tuner
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
        # The next batch, taken and being embedded while the current one is processed.
        self._ahead: tuple[list[Observation], asyncio.Future[np.ndarray]] | None = None
        # Turns the teacher tier finished, waiting for the write in flight to end.
        self._finished: list[Turn] = []
        self._finish_lock = asyncio.Lock()
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
        left = len(self._queue) + (len(self._ahead[0]) if self._ahead is not None else 0)
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
        if self._ahead is not None:
            self._ahead[1].cancel()
            await asyncio.gather(self._ahead[1], return_exceptions=True)
            self._ahead = None
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

    def _take_and_embed(self) -> tuple[list[Observation], asyncio.Future[np.ndarray]]:
        """Take a batch (in progress from now on, for `drain`) and start embedding it."""
        batch = self._take()
        self.stats.in_progress += 1
        return batch, asyncio.ensure_future(self._embedder.embed([o.request for o in batch]))

    async def _run(self) -> None:
        writing: asyncio.Task[None] | None = None
        try:
            while True:
                if self._ahead is None:
                    if not self._queue:
                        if writing is not None:
                            await writing
                            writing = None
                            continue
                        self._idle.set()
                        await self._wake.wait()
                        self._wake.clear()
                        continue
                    self._ahead = self._take_and_embed()
                batch, embedding = self._ahead
                self._ahead = None
                prepared = await self._prepare_taken(batch, embedding)
                if self._queue and self.config.overlap_writes:
                    self._ahead = self._take_and_embed()
                if writing is not None:
                    await writing  # batches reach the store in the order they were taken
                    writing = None
                if prepared is not None and prepared.snapshot is not self._ranker.snapshot:
                    # A fold (or a reload) landed while this batch was ranked: rank it again,
                    # so detection sees every label the batches before it wrote.
                    prepared = self._prepare(batch, prepared.vectors)
                writing = asyncio.create_task(self._write(batch, prepared))
                if not self.config.overlap_writes:
                    await writing
                    writing = None
        finally:
            if writing is not None:
                writing.cancel()
                await asyncio.gather(writing, return_exceptions=True)

    async def _prepare_taken(
        self, batch: Sequence[Observation], embedding: asyncio.Future[np.ndarray]
    ) -> _Prepared | None:
        """Embed (if the embedding failed) and rank a taken batch; None when that fails, and
        its turns are then processed one by one."""
        try:
            try:
                vectors = await embedding
            except asyncio.CancelledError:
                raise
            except Exception:
                vectors = await self._embedder.embed([o.request for o in batch])
            if self.config.overlap_writes:
                # In a worker thread: the previous batch's write and the HTTP requests sharing
                # this loop go on while this one is ranked.
                return await asyncio.to_thread(self._prepare, batch, vectors)
            return self._prepare(batch, vectors)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("intake_batch_retried_alone", turns=len(batch), error=repr(exc))
            return None

    async def _write(self, batch: Sequence[Observation], prepared: _Prepared | None) -> None:
        """Record a prepared batch (or, when it could not be prepared, its turns one by one)."""
        try:
            if prepared is None:
                await self._one_by_one(batch)
            else:
                await self._commit_isolated(prepared)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.stats.errors += 1
            log.exception("intake_batch_failed", turns=len(batch))
        finally:
            self.stats.in_progress -= 1
            self.stats.batches += 1
            self.stats.processed += len(batch)

    async def _commit_isolated(self, prepared: _Prepared) -> None:
        """Commit a batch; when it fails for a reason other than the store being unreachable,
        process its turns one by one so one bad turn costs only itself (counted and logged)."""
        try:
            await self._commit(prepared)
            return
        except (StoreUnavailable, asyncio.CancelledError):
            raise
        except Exception as exc:
            if len(prepared.batch) == 1:
                self._failed(prepared.batch[0], exc)
                return
            log.warning("intake_batch_retried_alone", turns=len(prepared.batch), error=repr(exc))
        await self._one_by_one(prepared.batch)

    async def _one_by_one(self, batch: Sequence[Observation]) -> None:
        for obs in batch:
            try:
                vectors = await self._embedder.embed([obs.request])
                await self._commit(self._prepare([obs], vectors))
            except (StoreUnavailable, asyncio.CancelledError):
                raise
            except Exception as exc:
                self._failed(obs, exc)

    def _failed(self, obs: Observation, exc: Exception) -> None:
        self.stats.failed_turns += 1
        self._metrics.intake_failed_turns.inc()
        log.error("intake_turn_failed", turn_id=obs.turn_id, error=repr(exc), exc_info=exc)

    def _prepare(self, batch: Sequence[Observation], vectors: np.ndarray) -> _Prepared:
        """Rank every turn of the batch on one snapshot and run the detector: no I/O."""
        floor = self._tuner.free_floor if self._tuner is not None else self.config.margin_floor
        snapshot = self._ranker.snapshot
        rankings = self._rank_batch(snapshot, vectors, batch)
        signals = [
            RankSignal(ranking.results[0].tool, ranking.margin) if ranking.results else None
            for ranking in rankings
        ]
        flags = [
            detect(
                obs.request,
                obs.used_tool,
                signal,
                fallback_tools=self.config.fallback_tools,
                margin_floor=floor,
            )
            for obs, signal in zip(batch, signals, strict=True)
        ]
        return _Prepared(batch, vectors, snapshot, floor, rankings, signals, flags)

    async def _commit(self, prepared: _Prepared) -> None:
        """Label the flagged turns of a prepared batch, record every turn, save and fold."""
        batch, floor, tuner = prepared.batch, prepared.floor, self._tuner
        flags = prepared.flags
        # The ratchet: one lookup for every flagged turn of the batch.
        flagged = [obs.request for obs, flag in zip(batch, flags, strict=True) if flag is not None]
        labels = await self._store.exemplars_for_queries(flagged) if flagged else {}
        turns: list[Turn] = []
        escalations: list[tuple[Turn, np.ndarray]] = []
        saves: list[tuple[Turn, np.ndarray, str, Tier, float]] = []
        for obs, vector, ranking, signal, flag in zip(
            batch, prepared.vectors, prepared.rankings, prepared.signals, flags, strict=True
        ):
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
            if flag is None:
                turns.append(turn)
                continue
            self._metrics.flags.labels(flag.reason).inc()
            existing = labels.get(normalise_query(obs.request))
            probability = self._confidence(ranking) if signal is not None else 0.0
            if tuner is not None and signal is not None:
                tuner.flagged(probability)
            decision = plan(
                flag,
                obs.outcome,
                signal,
                margin_floor=floor,
                ratchet_label=existing.tool if existing else None,
                tiers=self.config.tiers,
                used_tool=obs.used_tool,
                teacher_worth=tuner is None or tuner.worth_teaching(probability),
            )
            turn = replace(turn, flagged=True, flag_reason=flag.reason, tier=decision.tier)
            if decision.escalate:
                if tuner is not None:
                    tuner.escalated()
                if self._oracle.active:
                    escalations.append((turn, vector))
                else:
                    # No paid call can happen (kill switch, or no teacher): the teacher tier's
                    # answer is known now, so the turn is recorded once, finished, with the batch.
                    turn = replace(turn, result="declined")
                    self._decided(turn)
                    self._log_finished(turn, "teacher off")
            elif decision.label is not None:
                turn = replace(turn, label=decision.label, result="labeled")
                if decision.tier == "ranker":
                    saves.append((turn, vector, decision.label, "ranker", probability))
                self._decided(turn)
            else:
                turn = replace(turn, result="declined")
                self._decided(turn)
            turns.append(turn)
        await self._store.record_turns(turns)
        saved = await self._save(saves)
        if saved.changed:  # one fold per batch: a fold swaps the ranker's matrix
            await self._on_saved(saved)
        for turn, vector in escalations:
            self._escalate(turn, vector)

    def _rank(self, vector: np.ndarray, pack: str | None, k: int) -> Ranking:
        """The top `k` for one turn: within its pack when the pack has tools, else over the
        whole catalog (the teacher's candidates)."""
        if pack:
            in_pack = self._ranker.rank(vector, k, pack=pack)
            if in_pack.results:
                return in_pack
        return self._ranker.rank(vector, k)

    @staticmethod
    def _rank_batch(
        snapshot: Snapshot, vectors: np.ndarray, batch: Sequence[Observation]
    ) -> list[Ranking]:
        """Rank every turn of a batch on one snapshot (top-1 and margin: k=2): within its pack
        when that pack has tools, else over the whole catalog."""
        k = 2
        rankings = snapshot.rank_many(vectors, k)
        by_pack: dict[str, list[int]] = {}
        for i, obs in enumerate(batch):
            if obs.pack:
                by_pack.setdefault(obs.pack, []).append(i)
        for pack, rows in by_pack.items():
            for i, in_pack in zip(
                rows, snapshot.rank_many(vectors[rows], k, pack=pack), strict=True
            ):
                if in_pack.results:
                    rankings[i] = in_pack
        return rankings

    def _decided(self, turn: Turn) -> None:
        self._metrics.decisions.labels(turn.tier or "none", turn.result or "none").inc()

    async def _save(
        self, labels: Sequence[tuple[Turn, np.ndarray, str, Tier, float]]
    ) -> SaveResult:
        """Save labels in one store call."""
        if not labels:
            return SaveResult()
        now = self._clock()
        exemplars = [
            Exemplar(
                id=uuid.uuid4().hex,
                query=turn.request,
                tool=label,
                tier=tier,
                embedder=self._embedder.id,
                embedding=tuple(vector.tolist()),
                created_at=now,
                confidence=float(confidence),
                turn_id=turn.id,
            )
            for turn, vector, label, tier, confidence in labels
        ]
        result = await self._store.save_exemplars(exemplars)
        for unknown in result.unknown_tool:
            log.info("label_for_unknown_tool", tool=unknown.tool, turn_id=unknown.turn_id)
        self.stats.saved += len(result.changed)
        return result

    # -- teacher tier ------------------------------------------------------------------------

    def _confidence(self, ranking: Ranking) -> float:
        """The calibrated probability that the ranker's top-1 is right (the margin without a
        tuner)."""
        if self._tuner is None:
            return ranking.margin
        return self._tuner.current.calibration.probability(ranking.margin)

    def _escalate(self, turn: Turn, vector: np.ndarray) -> None:
        task = asyncio.create_task(self._teach(turn, vector), name=f"teach-{turn.id}")
        self._teaching.add(task)
        task.add_done_callback(self._teaching.discard)

    async def _teach(self, turn: Turn, vector: np.ndarray) -> None:
        key = normalise_query(turn.request)
        if not self._in_flight.reserve(key):
            await self._finish(replace(turn, result="declined"), "query already being labelled")
            return
        try:
            async with self._teacher_slots:
                candidates = self._teacher_candidates(vector, turn.pack)
                self._metrics.teacher_candidates.observe(len(candidates))
                answer = await self._oracle.teach(
                    turn.request, turn.used_tool, candidates, turn_id=turn.id
                )
            done = replace(turn, result=answer.result, label=answer.label)
            called = answer.attempts > 0  # not the kill switch, the budget or an error
            if self._tuner is not None and called and answer.result in ("labeled", "declined"):
                names = [c.name for c in candidates]
                position = names.index(answer.label) if answer.label in names else None
                self._tuner.teacher_answered(len(candidates), position)
            if answer.result == "labeled" and answer.label is not None:
                saved = await self._save([(done, vector, answer.label, "teacher", 1.0)])
                if saved.changed:
                    await self._on_saved(saved)
            await self._finish(done, answer.reason or answer.error)
        except ToolselectError as exc:
            await self._finish(replace(turn, result="error"), str(exc))
        finally:
            self._in_flight.release(key)

    def _teacher_candidates(self, vector: np.ndarray, pack: str | None) -> list[Candidate]:
        """The whole catalog (or pack) when small, else the ranked top `teacher_depth` (sized
        from the labels so it contains the true tool), cut to the token budget."""
        snapshot = self._ranker.snapshot
        in_pack = snapshot.packs.get(pack) if pack else None
        size = in_pack.size if in_pack is not None and in_pack.size else snapshot.size
        depth = self._tuner.current.teacher_depth if self._tuner else self.config.teacher_candidates
        k = size if size <= self.config.teacher_full_catalog else min(depth, size)
        ranked = self._rank(vector, pack, k)
        candidates = [Candidate(r.tool, self._describe(r.tool)) for r in ranked.results]
        costs = [estimated_tokens(c) for c in candidates]
        return candidates[: within_budget(costs, self.config.teacher_max_input_tokens)]

    async def _finish(self, turn: Turn, why: str | None) -> None:
        self._decided(turn)
        self._log_finished(turn, why)
        await self._record_finished(turn)

    def _log_finished(self, turn: Turn, why: str | None) -> None:
        log.info(
            "turn_labelled",
            turn_id=turn.id,
            tier=turn.tier,
            result=turn.result,
            label=turn.label,
            why=why,
        )

    async def _record_finished(self, turn: Turn) -> None:
        """Record a turn the teacher tier finished, once every turn finished before it is.

        Turns finished while such a write is in flight wait for it and are then recorded
        together by whichever of them runs first: a burst of escalations costs a few
        transactions instead of one each.
        A batch the store refuses is recorded turn by turn, so a bad turn fails alone.
        """
        self._finished.append(turn)
        async with self._finish_lock:
            if not self._finished:
                return  # recorded by the write of an earlier finisher
            turns, self._finished = self._finished, []
            try:
                await self._store.record_turns(turns)
                return
            except (StoreUnavailable, asyncio.CancelledError):
                raise
            except Exception as exc:
                if len(turns) == 1:
                    raise
                log.warning("finished_turns_retried_alone", turns=len(turns), error=repr(exc))
            for alone in turns:
                try:
                    await self._store.record_turns([alone])
                except (StoreUnavailable, asyncio.CancelledError):
                    raise
                except Exception as exc:
                    log.error("finished_turn_not_recorded", turn_id=alone.id, error=repr(exc))
