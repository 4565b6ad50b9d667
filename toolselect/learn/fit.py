"""Fitting the learning loop to the store's own labels (pure: numpy and scikit-learn, no I/O).

Three choices that used to be constants are made here at run time, from the labels whose truth
does not come from the ranker itself (tiers `teacher` and `feedback`; where there is none yet,
the agents' own successful choices, tier `usage`), by leave-one-out:

- **the fold** (`FoldWeights`): how much a tool's description weighs against its exemplars, how
  strongly many exemplars are shrunk towards their mean, and how much the ranker's own labels
  and the agents' usage labels count. The grid point with the best leave-one-out top-1 wins, unless it beats the prior by no
  more than two standard errors of the paired difference (then the prior stays: a choice must
  be backed by the labels, not by noise);
- **the free tier** (`Calibration`): the probability that the ranker's top-1 is right, as an
  isotonic (non-decreasing) function of the top-1/top-2 margin. Prior pseudo-labels keep the curve
  conservative until real labels outweigh them; the free tier labels a turn only where the
  probability reaches the target precision (`Calibration.floor`);
- **the teacher's candidates**: how deep in the ranking the true tool sits for the turns the
  teacher is asked about, measured from its own answers (`teacher_depth`), so it is shown enough
  candidates to contain the answer.

Leave-one-out is exact and cheap. A centroid is the normalised `dw * d + S / n**p` (description
`d`, exemplar sum `S` of `n` exemplars, the ranker's own labels weighted `self_weight`, usage
labels `usage_weight`, shrink power `p`); with the products of the validation vectors with every `d` and sum computed once,
each grid point is a few element-wise operations, and removing an exemplar from its own tool's
centroid is a rank-one correction of one score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np
import numpy.typing as npt

from toolselect.ranker import LabelView
from toolselect.ranker.configured import DEFAULT_USAGE_WEIGHT

Matrix = npt.NDArray[np.float64]
Scores = tuple[tuple[float, float, float, float, float], ...]

# Description weights tried (against exemplar weight 1) and shrink powers: 0 adds exemplars as a
# sum (each one counts fully), 1 as their mean (a tool's many labels weigh like one), 0.5 between.
DESCRIPTION_WEIGHTS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
SHRINK_POWERS: tuple[float, ...] = (0.0, 0.5, 1.0)
# How much the ranker's own labels count. They only ever agree with the ranker, so they start at
# 0 (stored, used by the ratchet, but not moving centroids) until trusted labels show they help.
SELF_WEIGHTS: tuple[float, ...] = (0.0, 0.5, 1.0)
# How much an agent's successful choice counts against a teacher's or human's label. An agent
# sometimes uses a wrong tool and still reports `ok`, so a usage label may count for less.
USAGE_WEIGHTS: tuple[float, ...] = (0.25, 0.5, 1.0)

# The prior of the free tier: `PRIOR_LABELS` pseudo-labels spread evenly over margins 0..0.5,
# right with probability 0.5 + 3 * margin (capped at 0.99), so the free tier starts labelling
# only above a margin of 0.15 (where 96-98% of free labels were right on the dev data) and
# real labels outweigh the prior after a few dozen.
PRIOR_LABELS = 30.0
# Candidates the teacher is shown before its answers can size them: all the token budget buys
# (the teacher setting's maximum). Until the answers say where the true tool ranks, a short
# listing would waste the first calls on declines, and answers from a wide one measure recall
# at every depth at once, so the depth can shrink to what the ranker needs.
DEFAULT_TEACHER_DEPTH = 1000
_PRIOR_MARGINS = np.linspace(0.0, 0.5, 21)
_PRIOR_RIGHT = np.minimum(0.5 + 3.0 * _PRIOR_MARGINS, 0.99)


@dataclass(frozen=True, slots=True)
class FoldWeights:
    """How centroids are folded: `dw * description + exemplar_sum / count ** shrink`, where
    the ranker's own (free-tier) labels count `self_weight` each, the agents' usage labels
    `usage_weight` each and trusted ones 1."""

    description_weight: float
    shrink: float = 0.0
    self_weight: float = 0.0
    usage_weight: float = DEFAULT_USAGE_WEIGHT


@dataclass(frozen=True, slots=True)
class LeaveOneOut:
    """Per validation label, with its own vector left out: was top-1 right, and the top-1/top-2
    margin."""

    right: npt.NDArray[np.bool_]
    margins: npt.NDArray[np.float64]

    @property
    def top1(self) -> float:
        return float(self.right.mean()) if self.right.size else 0.0


@dataclass(frozen=True, slots=True)
class Calibration:
    """P(ranker top-1 is right | margin), as the points of a non-decreasing step curve.

    `floor` is the smallest margin whose probability reaches `target` (infinite when none does:
    then the free tier never labels). `labels` counts the real labels behind the curve.
    """

    margins: tuple[float, ...]
    probabilities: tuple[float, ...]
    target: float
    floor: float
    labels: int

    def probability(self, margin: float) -> float:
        if not self.margins or not math.isfinite(margin):
            return 0.0
        return float(np.interp(margin, self.margins, self.probabilities))


@dataclass(frozen=True, slots=True)
class Fit:
    """Everything chosen from the labels at one refit, and the evidence for it."""

    fold: FoldWeights
    fold_source: str  # "prior" (too few labels, or no candidate beat it) or "validated"
    calibration: Calibration
    teacher_depth: int  # candidates that contain the true tool with the target recall
    teacher_recall: float | None  # estimated recall at that depth (None: prior depth)
    labels: int
    embedder: str = ""
    fitted_at: datetime | None = None
    # (description weight, shrink, self weight, usage weight, leave-one-out top-1) per grid point
    scores: Scores = field(default=())


@dataclass(frozen=True, slots=True)
class FitPolicy:
    """The targets and priors of a fit (settings)."""

    prior: FoldWeights
    target_precision: float = 0.95
    teacher_recall: float = 0.95
    teacher_share: float = 1.0
    prior_teacher_depth: int = DEFAULT_TEACHER_DEPTH
    min_labels: int = 30


class Products:
    """The products of the validation vectors with every description and exemplar sum.

    A tool's exemplar sum is `S = T + w * U + a * G` (trusted sum `T`, the ranker's own `U` with
    self weight `w`, the agents' usage labels `G` with usage weight `a`), so every product with
    `S` is a combination of products with `T`, `U` and `G`, computed once here for all the
    weights a grid tries.
    """

    def __init__(self, view: LabelView) -> None:
        self.view = view
        n = view.descriptions.shape[0]
        x = view.vectors
        x64 = x.astype(np.float64)
        rows = view.sum_rows
        d = view.descriptions.astype(np.float64)
        # float32 products (the ranker's own precision), float64 from there on.
        self.xd: Matrix = (x @ view.descriptions.T).astype(np.float64)  # (V, n)
        self.dd: Matrix = np.einsum("ij,ij->i", d, d)
        self.xx: Matrix = np.einsum("ij,ij->i", x64, x64)
        groups = (
            (view.sums, view.counts),
            (view.own_sums, view.own_counts),
            (view.usage_sums, view.usage_counts),
        )
        # Per group: products with the validation vectors, with the own description, counts;
        # and the Gram of the groups' sums per tool.
        self.xg = [np.zeros_like(self.xd) for _ in groups]
        self.dg = [np.zeros(n) for _ in groups]
        self.ng = [np.zeros(n) for _ in groups]
        self.gg = [[np.zeros(n) for _ in groups] for _ in groups]
        if rows.size:
            own = d[rows]
            for i, (sums, counts) in enumerate(groups):
                self.xg[i][:, rows] = x64 @ sums.T
                self.dg[i][rows] = np.einsum("ij,ij->i", own, sums)
                self.ng[i][rows] = counts
                for j in range(i + 1):
                    gram = np.zeros(n)
                    gram[rows] = np.einsum("ij,ij->i", sums, groups[j][0])
                    self.gg[i][j] = self.gg[j][i] = gram
        self.has_own = bool(view.own_counts.any())
        self.has_usage = bool(view.usage_counts.any())

    def scores(self, weights: FoldWeights) -> Matrix:
        """Cosine of every validation vector with every centroid, its own vector left out."""
        dw, p = weights.description_weight, weights.shrink
        mix = (1.0, weights.self_weight, weights.usage_weight)
        owners = self.view.owners
        at = np.arange(owners.size)
        xs = sum(m * xg for m, xg in zip(mix, self.xg, strict=True))
        ds = sum(m * dg for m, dg in zip(mix, self.dg, strict=True))
        count = sum(m * ng for m, ng in zip(mix, self.ng, strict=True))
        ss = sum(mix[i] * mix[j] * self.gg[i][j] for i in range(len(mix)) for j in range(len(mix)))
        assert isinstance(xs, np.ndarray) and isinstance(ds, np.ndarray)
        assert isinstance(count, np.ndarray) and isinstance(ss, np.ndarray)
        scale = _scale(count, p)
        num = dw * self.xd + scale[None, :] * xs
        norm2 = dw * dw * self.dd + 2.0 * dw * scale * ds + scale * scale * ss
        scores = num / _safe_sqrt(norm2)[None, :]
        # The own tool's centroid without this vector, which counts c (1 when trusted, the
        # usage weight for a usage label, else the self weight): S - c x over count - c.
        c = np.where(self.view.trusted, 1.0, np.where(self.view.usage, mix[2], mix[1]))
        own_xd, own_xs = self.xd[at, owners], xs[at, owners]
        own_scale = _scale(count[owners] - c, p)
        own_num = dw * own_xd + own_scale * (own_xs - c * self.xx)
        own_ss = np.maximum(ss[owners] - 2.0 * c * own_xs + c * c * self.xx, 0.0)
        own_norm2 = (
            dw * dw * self.dd[owners]
            + 2.0 * dw * own_scale * (ds[owners] - c * own_xd)
            + own_scale * own_scale * own_ss
        )
        scores[at, owners] = own_num / _safe_sqrt(own_norm2)
        return scores

    def leave_one_out(self, weights: FoldWeights) -> LeaveOneOut:
        scores = self.scores(weights)
        owners = self.view.owners
        at = np.arange(owners.size)
        truth = scores[at, owners]
        if scores.shape[1] >= 2:
            top2 = -np.partition(-scores, 1, axis=1)[:, :2]
            margins = top2[:, 0] - top2[:, 1]
        else:
            margins = np.maximum(scores[:, 0], 0.0)
        return LeaveOneOut(right=(scores > truth[:, None]).sum(axis=1) == 0, margins=margins)


def _scale(count: npt.NDArray[np.float64], p: float) -> npt.NDArray[np.float64]:
    """`1 / count ** p`, and 0 where there is no exemplar."""
    out = np.zeros_like(count)
    has = count > 1e-9  # a count less a removed label may carry rounding residue
    out[has] = count[has] ** -p
    return out


def _safe_sqrt(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    root = np.sqrt(np.maximum(x, 0.0))
    root[root == 0.0] = np.inf  # an empty centroid scores 0
    return root


def choose_fold(
    products: Products, prior: FoldWeights
) -> tuple[FoldWeights, str, Scores, LeaveOneOut]:
    """The grid point with the best smoothed leave-one-out top-1, unless it beats the prior by
    no more than two standard errors of the paired difference: near the optimum top-1 is flat
    and leave-one-out is noisy, so leaving the prior must be clearly worth it. (Each refit
    compares against the prior, not the weights in use: anchoring on an early choice made on
    few labels did worse across four splits of the dev data.)

    Each point's score is averaged with its neighbours on the (log) description-weight axis
    (weights 1/4, 1/2, 1/4): top-1 varies smoothly with the weight while single-label noise
    does not, so the smoothed maximum moves less from one sample of labels to the next.
    """
    selfs = SELF_WEIGHTS if products.has_own else (prior.self_weight,)
    usages = USAGE_WEIGHTS if products.has_usage else (prior.usage_weight,)
    lines = [(p, w, a) for p in SHRINK_POWERS for w in selfs for a in usages]
    grid = [FoldWeights(dw, p, w, a) for p, w, a in lines for dw in DESCRIPTION_WEIGHTS]
    results = {point: products.leave_one_out(point) for point in grid}
    if prior not in results:
        results[prior] = products.leave_one_out(prior)
    scores = tuple(
        (f.description_weight, f.shrink, f.self_weight, f.usage_weight, r.top1)
        for f, r in results.items()
    )
    smoothed: dict[FoldWeights, float] = {}
    for p, w, a in lines:
        row = [results[FoldWeights(dw, p, w, a)].top1 for dw in DESCRIPTION_WEIGHTS]
        padded = [row[0], *row, row[-1]]
        for i, dw in enumerate(DESCRIPTION_WEIGHTS):
            smoothed[FoldWeights(dw, p, w, a)] = (
                0.25 * padded[i] + 0.5 * padded[i + 1] + 0.25 * padded[i + 2]
            )
    # Ties go to the grid point nearest the prior (the smallest change).
    best = max(grid, key=lambda f: (round(smoothed[f], 9), -_distance(f, prior)))
    base = results[prior]
    diff = results[best].right.astype(np.float64) - base.right.astype(np.float64)
    n = diff.size
    se = float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else math.inf
    if best != prior and float(diff.mean()) > 2.0 * se:
        return best, "validated", scores, results[best]
    return prior, "prior", scores, base


def _distance(a: FoldWeights, b: FoldWeights) -> float:
    return (
        abs(math.log2(a.description_weight / b.description_weight))
        + abs(a.shrink - b.shrink)
        + abs(a.self_weight - b.self_weight)
        + abs(a.usage_weight - b.usage_weight)
    )


def isotonic_fit(
    x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], weights: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The weighted least-squares non-decreasing fit of `y` on `x` (pool adjacent violators),
    as the knots of a piecewise-linear curve: equal `x` values pooled first, then of each
    constant run only its two ends kept (what scikit-learn's `IsotonicRegression` keeps as
    `X_thresholds_` / `y_thresholds_`; `tests/unit/test_fit.py` checks the two agree)."""
    order = np.lexsort((y, x))
    x, y, weights = x[order], y[order], weights[order]
    xs, starts = np.unique(x, return_index=True)
    w = np.add.reduceat(weights, starts)
    ys = np.add.reduceat(weights * y, starts) / w
    # One block per pooled run: (mean, weight, number of x values).
    means: list[float] = []
    sizes: list[float] = []
    counts: list[int] = []
    for value, weight in zip(ys.tolist(), w.tolist(), strict=True):
        means.append(value)
        sizes.append(weight)
        counts.append(1)
        while len(means) > 1 and means[-2] >= means[-1]:
            weight = sizes[-2] + sizes[-1]
            means[-2] = (means[-2] * sizes[-2] + means[-1] * sizes[-1]) / weight
            sizes[-2] = weight
            counts[-2] += counts[-1]
            del means[-1], sizes[-1], counts[-1]
    fitted = np.repeat(np.asarray(means, dtype=np.float64), counts)
    keep = np.ones(fitted.size, dtype=bool)
    if fitted.size > 2:
        keep[1:-1] = (fitted[:-2] != fitted[1:-1]) | (fitted[1:-1] != fitted[2:])
    return xs[keep], fitted[keep]


def calibrate(
    margins: npt.NDArray[np.float64], right: npt.NDArray[np.bool_], target: float
) -> Calibration:
    """Isotonic P(right | margin) over the labels and the prior's pseudo-labels."""
    x = np.concatenate([np.asarray(margins, dtype=np.float64), _PRIOR_MARGINS])
    y = np.concatenate([np.asarray(right, dtype=np.float64), _PRIOR_RIGHT])
    w = np.concatenate(
        [np.ones(len(margins)), np.full(_PRIOR_MARGINS.size, PRIOR_LABELS / _PRIOR_MARGINS.size)]
    )
    finite = np.isfinite(x)
    xs, ys = isotonic_fit(x[finite], y[finite], w[finite])
    reached = np.flatnonzero(ys >= target)
    floor = float(xs[reached[0]]) if reached.size else math.inf
    return Calibration(
        margins=tuple(float(v) for v in xs),
        probabilities=tuple(float(v) for v in ys),
        target=target,
        floor=floor,
        labels=len(margins),
    )


def teacher_depth(
    answers: Sequence[tuple[int, int | None]], recall: float, prior: int, min_answers: int
) -> tuple[int, float | None]:
    """Candidates to show the teacher, from its own answers: `(shown, position)` per call, the
    position of its label among the candidates shown, or None when it declined (the true tool
    was not among them). The smallest depth whose measured recall reaches `recall` with 95%
    confidence (Wilson lower bound), so a lucky streak of easy turns does not shrink it; when
    even the deepest shown falls short, half as deep again (the answers then say whether that
    was enough). Before `min_answers` answers: `prior`. Returns the depth and the recall
    measured at it.

    The teacher's answers are the only labels that can say this: a label exists only where the
    true tool was shown, so recall measured on saved labels alone is always flattering.
    """
    if len(answers) < min_answers:
        return prior, None
    shown = np.fromiter((s for s, _ in answers), dtype=np.intp)
    found = np.fromiter((math.inf if p is None else p for _, p in answers), dtype=np.float64)
    deepest = int(shown.max())
    for depth in range(1, deepest + 1):
        asked = shown >= depth
        n = int(asked.sum())
        if n < min_answers:
            break
        measured = float((found[asked] < depth).mean())
        if _wilson_lower(measured, n) >= recall:
            return depth, measured
    asked = shown >= deepest
    return max(deepest + 1, math.ceil(deepest * 1.5)), float((found[asked] < deepest).mean())


def _wilson_lower(p: float, n: int, z: float = 1.645) -> float:
    """One-sided 95% lower bound of a proportion `p` measured on `n` trials."""
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n)


def prior_fit(policy: FitPolicy, embedder: str = "") -> Fit:
    """The fit before any label: prior fold, prior calibration, prior teacher depth."""
    empty = np.zeros(0)
    return Fit(
        fold=policy.prior,
        fold_source="prior",
        calibration=calibrate(empty, empty.astype(bool), policy.target_precision),
        teacher_depth=policy.prior_teacher_depth,
        teacher_recall=None,
        labels=0,
        embedder=embedder,
    )


def fit(
    view: LabelView,
    policy: FitPolicy,
    *,
    embedder: str = "",
    at: datetime | None = None,
) -> Fit:
    """Choose the fold and calibrate the free tier from `view`.

    The fold is validated on every label, the ranker's own included: the teacher's labels are
    the turns the ranker was unsure of, and alone they favour whatever helps hard queries at
    the expense of the easy ones the free tier labelled. The calibration uses the trusted
    labels only (the ranker's own are right by its own account, which would flatter it), or,
    while there is none, the agents' usage labels (`LabelView.validating`).
    """
    if view.size == 0 or view.descriptions.shape[0] < 2:
        return replace(prior_fit(policy, embedder), fitted_at=at)
    products = Products(view)
    scores: Scores = ()
    if view.size < policy.min_labels:
        fold, source = policy.prior, "prior"
        loo = products.leave_one_out(fold)
    else:
        fold, source, scores, loo = choose_fold(products, policy.prior)
    truth = view.validating
    calibration = calibrate(loo.margins[truth], loo.right[truth], policy.target_precision)
    return Fit(
        fold=fold,
        fold_source=source,
        calibration=calibration,
        teacher_depth=policy.prior_teacher_depth,
        teacher_recall=None,
        labels=view.size,
        embedder=embedder,
        fitted_at=at,
        scores=scores,
    )
