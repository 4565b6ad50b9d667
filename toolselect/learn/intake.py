"""Intake: the bounded queue `observe()` fills, and the worker that empties it batch by batch.

Appending only takes a lock and wakes the worker: it never embeds, ranks, or touches the store
or the network, and it is safe from the event loop and from any thread. A full queue drops the
turn and counts it.

The worker takes what is queued (up to `batch_size`) and per batch: embeds the requests in one
call, ranks them on one snapshot and runs the detector (`batch.prepare`), then hands the batch
to the labeller, which looks up the ratchet, records, saves and folds. With `overlap_writes` (a
store in another process) the next batch is taken, embedded and ranked (in a worker thread)
while this one is written; the store work itself stays strictly batch after batch, so each
batch's lookup sees what the batches before it saved, and a batch ranked on a snapshot that a
fold has since replaced is ranked again before it is written. A batch that fails for a reason
other than an unreachable store is retried turn by turn, so a turn that cannot be processed is
counted and logged alone and the others are recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import numpy as np
import structlog

from toolselect.embed import Embedder
from toolselect.errors import SpoolError, StoreError, StoreUnavailable
from toolselect.learn.batch import Prepared, prepare
from toolselect.learn.detect import is_fallback
from toolselect.learn.labelling import Labeller
from toolselect.learn.records import LearnerConfig, LearnerStats, Observation
from toolselect.learn.tuning import Tuner
from toolselect.metrics import Metrics
from toolselect.names import catalog_names
from toolselect.ranker import CentroidRanker

log = structlog.get_logger("toolselect.learn")


class Intake:
    """The queue of observed turns and the worker that prepares them and hands them on."""

    def __init__(
        self,
        *,
        embedder: Embedder,
        ranker: CentroidRanker,
        labeller: Labeller,
        config: LearnerConfig,
        tuner: Tuner | None,
        metrics: Metrics,
        stats: LearnerStats,
        catch_up: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self._embedder = embedder
        self._catch_up = catch_up
        self._ranker = ranker
        self._labeller = labeller
        self._config = config
        self._tuner = tuner
        self._metrics = metrics
        self._stats = stats
        self._queue: deque[Observation] = deque()
        self._lock = threading.Lock()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop: asyncio.AbstractEventLoop | None = None
        # The next batch, taken and being embedded while the current one is processed.
        self._ahead: tuple[list[Observation], asyncio.Future[np.ndarray]] | None = None

    # -- the queue ---------------------------------------------------------------------------

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the worker runs on, woken from other threads through it."""
        self._loop = loop

    def offer(self, observation: Observation) -> bool:
        """Queue a turn and wake the worker: True when queued, False when the queue is full."""
        with self._lock:
            if len(self._queue) >= self._config.queue_size:
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
        """Turns queued and not taken yet."""
        return len(self._queue)

    @property
    def pending(self) -> int:
        """Turns not processed yet: queued, or taken ahead and still being embedded."""
        return len(self._queue) + (len(self._ahead[0]) if self._ahead is not None else 0)

    async def wait_idle(self, within_s: float) -> None:
        """Wait up to `within_s` seconds for the worker to find the queue empty."""
        self._idle.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), within_s)

    async def take_unprocessed(self) -> list[Observation]:
        """Empty the queue once the worker has stopped: the batch taken ahead and every turn
        still queued, in the order they came."""
        left: list[Observation] = []
        if self._ahead is not None:
            self._ahead[1].cancel()
            await asyncio.gather(self._ahead[1], return_exceptions=True)
            left.extend(self._ahead[0])
            self._ahead = None
        with self._lock:
            left.extend(self._queue)
            self._queue.clear()
        self._metrics.queue_depth.set(0)
        return left

    # -- the worker --------------------------------------------------------------------------

    def _take(self) -> list[Observation]:
        with self._lock:
            count = min(len(self._queue), self._config.batch_size)
            batch = [self._queue.popleft() for _ in range(count)]
            depth = len(self._queue)
        self._metrics.queue_depth.set(depth)
        return batch

    def _take_and_embed(self) -> tuple[list[Observation], asyncio.Future[np.ndarray]]:
        """Take a batch (in progress from now on, for `drain`) and start embedding it."""
        batch = self._take()
        self._stats.in_progress += 1
        return batch, asyncio.ensure_future(self._embedder.embed([o.request for o in batch]))

    async def run(self) -> None:
        """The worker: take, embed, rank and write batches until cancelled."""
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
                await self._know_used_tools(batch)
                prepared = await self._prepare_taken(batch, embedding)
                if self._queue and self._config.overlap_writes:
                    self._ahead = self._take_and_embed()
                if writing is not None:
                    await writing  # batches reach the store in the order they were taken
                    writing = None
                if prepared is not None and prepared.snapshot is not self._ranker.snapshot:
                    # A fold (or a reload) landed while this batch was ranked: rank it again,
                    # so detection sees every label the batches before it wrote.
                    prepared = self._prepare(batch, prepared.vectors)
                writing = asyncio.create_task(self._write(batch, prepared))
                if not self._config.overlap_writes:
                    await writing
                    writing = None
        finally:
            if writing is not None:
                writing.cancel()
                await asyncio.gather(writing, return_exceptions=True)

    async def _know_used_tools(self, batch: Sequence[Observation]) -> None:
        """Catch the ranker up with the store's catalog when a turn used a tool it does not
        know (not a fallback): another replica may have just added it, and its usage label
        would otherwise be lost. A store that cannot answer leaves the batch as it is."""
        if self._catch_up is None:
            return
        known = catalog_names(self._ranker.snapshot.names)
        fallbacks = self._config.fallback_tools
        if all(
            not name or is_fallback(name, fallbacks) or known.matches(name)
            for obs in batch
            for name in (obs.used_tool, *obs.used_tools)
        ):
            return
        try:
            await self._catch_up()
        except StoreError as exc:
            log.info("catalog_catch_up_failed", error=str(exc))

    async def _prepare_taken(
        self, batch: Sequence[Observation], embedding: asyncio.Future[np.ndarray]
    ) -> Prepared | None:
        """Embed (if the embedding failed) and rank a taken batch; None when that fails, and
        its turns are then processed one by one."""
        try:
            try:
                vectors = await embedding
            except asyncio.CancelledError:
                raise
            except Exception:
                vectors = await self._embedder.embed([o.request for o in batch])
            if self._config.overlap_writes:
                # In a worker thread: the previous batch's write and the HTTP requests sharing
                # this loop go on while this one is ranked.
                return await asyncio.to_thread(self._prepare, batch, vectors)
            return self._prepare(batch, vectors)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("intake_batch_retried_alone", turns=len(batch), error=repr(exc))
            return None

    async def _write(self, batch: Sequence[Observation], prepared: Prepared | None) -> None:
        """Record a prepared batch (or, when it could not be prepared, its turns one by one)."""
        try:
            if prepared is None:
                await self._one_by_one(batch)
            else:
                await self._commit_isolated(prepared)
        except asyncio.CancelledError:
            raise
        except SpoolError as exc:
            # Neither the store nor the spool could keep the batch's writes (a full disk; the
            # labeller counts the turns lost): no turn is at fault, so none is tried alone (that
            # was a traceback a turn); one line a batch.
            self._stats.errors += 1
            log.error("intake_batch_unwritable", turns=len(batch), error=str(exc))
        except Exception:
            self._stats.errors += 1
            log.exception("intake_batch_failed", turns=len(batch))
        finally:
            self._stats.in_progress -= 1
            self._stats.batches += 1
            self._stats.processed += len(batch)

    async def _commit_isolated(self, prepared: Prepared) -> None:
        """Commit a batch; when it fails for a reason other than the store being unreachable,
        process its turns one by one so one bad turn costs only itself (counted and logged)."""
        try:
            await self._labeller.commit(prepared)
            return
        except (StoreUnavailable, SpoolError, asyncio.CancelledError):
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
                await self._labeller.commit(self._prepare([obs], vectors))
            except (StoreUnavailable, SpoolError, asyncio.CancelledError):
                raise
            except Exception as exc:
                self._failed(obs, exc)

    def _failed(self, obs: Observation, exc: Exception) -> None:
        self._stats.failed_turns += 1
        self._metrics.intake_failed_turns.inc()
        log.error("intake_turn_failed", turn_id=obs.turn_id, error=repr(exc), exc_info=exc)

    def _prepare(self, batch: Sequence[Observation], vectors: np.ndarray) -> Prepared:
        """Rank every turn of the batch on the current snapshot and run the detector: no I/O."""
        floor = self._tuner.free_floor if self._tuner is not None else self._config.margin_floor
        return prepare(
            batch,
            vectors,
            self._ranker.snapshot,
            floor=floor,
            fallback_tools=self._config.fallback_tools,
        )
