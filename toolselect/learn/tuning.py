"""The tuner: refits the fold, the free-tier calibration and the teacher's depth as labels grow.

It keeps the current `Fit` (read by the learner on every flagged turn: one attribute read) and
refits in a worker thread when the labels it validates on (teacher and human; the agents' usage
labels while there is none of those) folded into the ranker have changed by `REFIT_GROWTH` of
those the last fit had (and by at least `REFIT_MIN_NEW`), one refit at a time. Changes, not
growth: a label added, replaced (by another tool or tier) or removed counts one
(`CentroidRanker.validating_changes`), so corrections that leave the count where it was move
the fit too; on pure growth the changes are the growth, and the refits those of growth alone.
A refit that picks other fold weights re-folds every centroid (`CentroidRanker.reweight`).
Settings may pin the fold (`TOOLSELECT_DESCRIPTION_WEIGHT=<number>`), the free tier
(`TOOLSELECT_MARGIN_FLOOR=<number>`) and the teacher's depth (`TOOLSELECT_TEACHER_CANDIDATES`);
what is pinned is reported, never refitted.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from dataclasses import replace
from pathlib import Path

import structlog

from toolselect.clock import Clock, utc_now
from toolselect.learn.fit import Calibration, Fit, FitPolicy, fit, prior_fit, teacher_depth
from toolselect.learn.kept_fold import write_fold
from toolselect.learn.window import SortedWindow
from toolselect.metrics import Metrics
from toolselect.ranker import CentroidRanker
from toolselect.ranker.centroids import Weights

log = structlog.get_logger("toolselect.learn")

REFIT_GROWTH = 0.1
REFIT_MIN_NEW = 10
# Leave-one-out over more labels than this buys little accuracy and costs a (V x tools) matrix.
VALIDATION_LIMIT = 2000
# The teacher's recent answers that size its candidates: recent, so the depth follows the ranker.
TEACHER_ANSWERS = 500
# Recent flagged turns whose calibrated probabilities set the escalation cutoff.
FLAGGED_WINDOW = 1000


class Tuner:
    """Owns the current `Fit` of one ranker; see the module docstring."""

    def __init__(
        self,
        ranker: CentroidRanker,
        policy: FitPolicy,
        *,
        embedder: str,
        pinned_fold: bool = False,
        pinned_floor: float | None = None,
        pinned_depth: bool = False,
        metrics: Metrics | None = None,
        clock: Clock = utc_now,
        kept_at: Path | None = None,
        store: str = "",
    ) -> None:
        self._ranker = ranker
        self._policy = policy
        self._embedder = embedder
        self._pinned_fold = pinned_fold
        self._pinned_floor = pinned_floor
        self._pinned_depth = pinned_depth
        self._metrics = metrics or Metrics()
        self._clock = clock
        self._kept_at, self._store = kept_at, store  # the fold the exec selector reads
        self._keep_failed = False
        self._fitted_on = 0  # validating labels the last fit had
        self._changes_at_fit = 0  # and the ranker's validating_changes then
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._answers: deque[tuple[int, int | None]] = deque(maxlen=TEACHER_ANSWERS)
        self._flagged = SortedWindow(FLAGGED_WINDOW)
        self._flagged_total = 0
        self._escalated = 0
        self.current = self._pin(prior_fit(policy, embedder))
        self._publish()

    @property
    def free_floor(self) -> float:
        """The margin at which the ranker's own top-1 is trusted (infinite: never)."""
        return self.current.calibration.floor

    def worth_teaching(self, probability: float) -> bool:
        """Whether a flagged turn the free tier cannot label is worth a teacher call: with a
        `teacher_share` below 1, only when its calibrated probability is below that quantile of
        the recent flagged turns' (the most uncertain share), and while the calls so far stay
        within the share of the flagged turns so far (which also bounds the first turns, before
        there is a quantile)."""
        share = self._policy.teacher_share
        if share >= 1.0:
            return True
        if self._escalated + 1 > share * self._flagged_total + 1:
            return False
        if len(self._flagged) < self._policy.min_labels:
            return True
        return probability < self._flagged.quantile(share)

    def flagged(self, probability: float) -> None:
        """Note the calibrated probability of a flagged turn (for `worth_teaching`)."""
        self._flagged.add(probability)
        self._flagged_total += 1

    def escalated(self) -> None:
        """Note a turn sent to the teacher (for `worth_teaching`)."""
        self._escalated += 1

    def teacher_answered(self, shown: int, position: int | None) -> None:
        """The teacher saw `shown` candidates and picked the one at `position` (None: it
        declined, the true tool was not among them); re-sizes the next calls' candidates."""
        if self._pinned_depth:
            return
        self._answers.append((shown, position))
        depth, recall = teacher_depth(
            self._answers,
            self._policy.teacher_recall,
            self._policy.prior_teacher_depth,
            self._policy.min_labels,
        )
        if (depth, recall) != (self.current.teacher_depth, self.current.teacher_recall):
            self.current = replace(self.current, teacher_depth=depth, teacher_recall=recall)
            self._metrics.teacher_depth.set(depth)

    def labels_changed(self) -> None:
        """Schedule a refit when enough validating labels changed since the last one."""
        changed = self._ranker.validating_changes - self._changes_at_fit
        if changed < max(REFIT_MIN_NEW, REFIT_GROWTH * self._fitted_on):
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.create_task(self._refit_loop(), name="toolselect-refit")

    async def _refit_loop(self) -> None:
        while True:
            self._again = False
            try:
                await self.refit()
            except Exception:  # a failed refit keeps the last fit; the loop must live on
                log.exception("refit_failed")
                return
            if not self._again:
                return

    async def refit(self) -> Fit:
        """Fit now (in a worker thread) and apply the result."""
        started = asyncio.get_running_loop().time()
        trusted = self._ranker.validating_total
        changes = self._ranker.validating_changes
        at = self._clock()

        def run() -> Fit:
            view, _ = self._ranker.label_view(VALIDATION_LIMIT, seed=trusted)
            return fit(view, self._policy, embedder=self._embedder, at=at)

        fitted = self._pin(await asyncio.to_thread(run))
        fitted = replace(
            fitted,
            teacher_depth=self.current.teacher_depth,
            teacher_recall=self.current.teacher_recall,
        )
        self._fitted_on, self._changes_at_fit = trusted, changes
        if not self._pinned_fold:
            # The fit weighs descriptions against exemplar weight 1; the ranker may scale both.
            exemplar_weight = self._ranker.weights[1]
            self._ranker.reweight(
                fitted.fold.description_weight * exemplar_weight,
                fitted.fold.shrink,
                fitted.fold.self_weight,
                fitted.fold.usage_weight,
            )
        self.current = fitted
        await self._keep()
        self._metrics.refits.inc()
        self._publish()
        log.info(
            "learning_refit",
            labels=fitted.labels,
            description_weight=fitted.fold.description_weight,
            shrink=fitted.fold.shrink,
            self_weight=fitted.fold.self_weight,
            usage_weight=fitted.fold.usage_weight,
            fold_source=fitted.fold_source,
            free_floor=fitted.calibration.floor,
            teacher_depth=fitted.teacher_depth,
            took_s=round(asyncio.get_running_loop().time() - started, 3),
        )
        return fitted

    async def _keep(self) -> None:
        """Write the ranker's weights for the exec selector (`learn/kept_fold.py`); a failure
        (a read-only folder, a full disk) is logged once and costs spawns the fit, not this."""
        if self._kept_at is None:
            return
        weights = Weights(*self._ranker.weights, self._ranker.usage_weight)
        try:
            await asyncio.to_thread(write_fold, self._kept_at, self._store, self._embedder, weights)
        except OSError as exc:
            if not self._keep_failed:
                log.warning("fold_not_kept", path=str(self._kept_at), error=str(exc))
            self._keep_failed = True

    async def settle(self) -> None:
        """Wait for a refit in progress (benchmarks and tests read the fit after it)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _pin(self, fitted: Fit) -> Fit:
        if self._pinned_fold:
            fitted = replace(fitted, fold=self._policy.prior, fold_source="pinned")
        if self._pinned_floor is not None:
            fitted = replace(
                fitted, calibration=replace(fitted.calibration, floor=self._pinned_floor)
            )
        return fitted

    def _publish(self) -> None:
        fitted = self.current
        floor = fitted.calibration.floor
        self._metrics.free_tier_floor.set(floor if math.isfinite(floor) else -1.0)
        self._metrics.calibration_labels.set(fitted.labels)
        self._metrics.fold_description_weight.set(fitted.fold.description_weight)
        self._metrics.fold_shrink.set(fitted.fold.shrink)
        self._metrics.fold_self_weight.set(fitted.fold.self_weight)
        self._metrics.fold_usage_weight.set(fitted.fold.usage_weight)
        self._metrics.teacher_depth.set(fitted.teacher_depth)
        if fitted.fitted_at is not None:
            self._metrics.last_refit.set(fitted.fitted_at.timestamp())


def fit_payload(fitted: Fit, pinned_floor: bool = False) -> dict[str, object]:
    """The body of `GET /v1/analytics/learning`: what the loop chose and the evidence."""
    calibration: Calibration = fitted.calibration
    return {
        "embedder": fitted.embedder,
        "labels": fitted.labels,
        "fitted_at": fitted.fitted_at.isoformat() if fitted.fitted_at else None,
        "fold": {
            "description_weight": fitted.fold.description_weight,
            "shrink": fitted.fold.shrink,
            "self_weight": fitted.fold.self_weight,
            "usage_weight": fitted.fold.usage_weight,
            "source": fitted.fold_source,
            "validation": [
                {
                    "description_weight": dw,
                    "shrink": p,
                    "self_weight": w,
                    "usage_weight": a,
                    "top1": round(top1, 4),
                }
                for dw, p, w, a, top1 in fitted.scores
            ],
        },
        "free_tier": {
            "target_precision": calibration.target,
            "margin_floor": calibration.floor if math.isfinite(calibration.floor) else None,
            "floor_source": "pinned" if pinned_floor else "calibrated",
            "labels": calibration.labels,
            "curve": [
                {"margin": round(m, 4), "probability": round(p, 4)}
                for m, p in zip(calibration.margins, calibration.probabilities, strict=True)
            ],
        },
        "teacher": {
            "depth": fitted.teacher_depth,
            "measured_recall": fitted.teacher_recall,
        },
    }
