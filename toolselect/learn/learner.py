"""The learner: a non-blocking `observe()` in front of the intake queue, and its lifecycle.

`observe()` stamps a turn with the injected clock and queues it (`intake.Intake`); it never
embeds, ranks, or touches the store or the network, and it is safe from the event loop and from
any thread. The intake worker ranks and checks turns in batches; the labeller
(`labelling.Labeller`) labels the flagged ones, records every turn and saves the labels. This
module wires the two together and opens, starts, drains and closes them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Unpack

import structlog

from toolselect.clock import Clock, utc_now
from toolselect.embed import Embedder
from toolselect.learn.intake import Intake
from toolselect.learn.labelling import Labeller
from toolselect.learn.records import LearnerConfig, LearnerStats, Observation, plain_turn
from toolselect.learn.refused import Refused
from toolselect.learn.tuning import Tuner
from toolselect.metrics import Metrics
from toolselect.oracle.oracle import Oracle
from toolselect.ranker import CentroidRanker
from toolselect.records import SaveResult, Turn
from toolselect.store.port import LearnerStore

if TYPE_CHECKING:
    from toolselect.turns import TurnFields

# The learner's constructor takes a LearnerConfig, so its callers find both here.
__all__ = ["Learner", "LearnerConfig", "LearnerStats"]

log = structlog.get_logger("toolselect.learn")


class Learner:
    """Observe turns, detect mis-routes, label them and save exemplars; see the module docstring."""

    def __init__(
        self,
        *,
        store: LearnerStore,
        embedder: Embedder,
        ranker: CentroidRanker,
        oracle: Oracle,
        on_saved: Callable[[SaveResult], Awaitable[None]],
        describe: Callable[[str], str],
        config: LearnerConfig,
        catch_up: Callable[[], Awaitable[object]] | None = None,
        tuner: Tuner | None = None,
        metrics: Metrics | None = None,
        clock: Clock = utc_now,
        refused: Refused | None = None,
    ) -> None:
        self.config = config
        self._metrics = metrics or Metrics()
        self._clock = clock
        self.stats = LearnerStats()
        self._labeller = Labeller(
            store=store,
            embedder=embedder,
            ranker=ranker,
            oracle=oracle,
            on_saved=on_saved,
            describe=describe,
            config=config,
            tuner=tuner,
            metrics=self._metrics,
            stats=self.stats,
            clock=clock,
            refused=refused,
        )
        self._intake = Intake(
            embedder=embedder,
            ranker=ranker,
            labeller=self._labeller,
            config=config,
            tuner=tuner,
            metrics=self._metrics,
            stats=self.stats,
            catch_up=catch_up,
        )
        self._worker: asyncio.Task[None] | None = None
        self._accepting = False

    # -- intake ------------------------------------------------------------------------------

    def observe(
        self, request: str, used_tool: str | None = None, **turn: Unpack[TurnFields]
    ) -> bool:
        """Queue a turn for the worker and return at once: True when queued, False when dropped."""
        return self.offer(Observation.of(request, used_tool, turn, at=self._clock()))

    def offer(self, observation: Observation) -> bool:
        """`observe` for a turn already made into an `Observation` (stamped by the caller)."""
        if not self._accepting:
            self._metrics.dropped.labels("closed").inc()
            return False
        return self._intake.offer(observation)

    @property
    def depth(self) -> int:
        return self._intake.depth

    @property
    def refused(self) -> Refused:
        """The turns the spent budget refused, to be asked about once it has room."""
        return self._labeller.refused

    async def ask_again(self) -> int:
        """Escalate turns the spent budget refused, once it has room (`Labeller.ask_again`)."""
        return await self._labeller.ask_again()

    async def close_abandoned(self) -> int:
        """Close the teacher-tier turns a stopped process left undecided (`Labeller`)."""
        return await self._labeller.close_abandoned()

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self) -> None:
        """Accept turns into the queue (the worker may start later, once the catalog loads)."""
        self._intake.bind(asyncio.get_running_loop())
        self._accepting = True

    def start(self) -> None:
        """Accept turns and start the intake worker on the running loop."""
        if self._worker is not None:
            return
        self.open()
        self._worker = asyncio.create_task(self._intake.run(), name="toolselect-learner-intake")

    async def drain(self, within_s: float) -> bool:
        """Wait until the queue is empty and no batch or teacher call is in progress."""
        teaching = self._labeller.teaching

        async def settled() -> None:
            while self._intake.depth or self.stats.in_progress or teaching:
                if teaching:
                    await asyncio.wait(set(teaching), timeout=0.05)
                else:
                    await self._intake.wait_idle(0.05)

        try:
            await asyncio.wait_for(settled(), within_s)
        except TimeoutError:
            return False
        return True

    async def close(self, within_s: float = 10.0) -> list[Turn]:
        """Stop intake, drain within `within_s`, cancel teacher calls, join every task; return
        the turns accepted and never recorded, unranked and unlabelled, for the caller to keep
        (the service spools them): those queued while the catalog never loaded (the store down
        since the start: no worker takes them), or left by a drain that timed out, the batch it
        cut short included."""
        self._accepting = False
        self._labeller.stop()
        started = self._worker is not None
        drained = await self.drain(within_s) if started else not self._intake.pending
        teaching = self._labeller.teaching
        if not drained:
            event = "learner_drain_timeout" if started else "learner_never_started"
            log.warning(event, left=self._intake.pending, teaching=len(teaching))
        tasks = [*teaching]
        if self._worker is not None:
            tasks.append(self._worker)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # A commit the cancel cut short before its turns were recorded (a store that hangs past
        # the drain) leaves them to be kept with the queue, ahead of it.
        left = [*self._labeller.unrecorded, *await self._intake.take_unprocessed()]
        self._labeller.unrecorded = ()
        self._worker = None
        teaching.clear()
        return [plain_turn(obs) for obs in left]
