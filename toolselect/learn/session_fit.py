"""How much the conversation signals weigh, fitted on the store's own sessions by held-out
validation. Pure: turns, their request vectors and the ranker's centroids in, weights out.

Three signals, each zero (off) until the sessions show it helps:
- the session prior: the tools that followed the previous turn's tools in other sessions,
  mixed into the scores as `(score + w * prior) / (1 + w)`;
- the context: the previous message's scores mixed in as `(q + w * c) / (1 + w)` of the
  query vectors (so a request with context is ranked as the message alone at `w = 0`);
- companions: partners of the ranked tools offered beside the top k, from a minimum share of
  the ranked tool's pairs.

Validation is two-fold by session: the relations a fold is scored with are counted (by the
stores' own rule, `store/session_rules.plan_sessions`) from the other fold's sessions only, so a turn
never predicts itself. Prior and context are chosen together on the follow-up turns (share of
the used tools in the top k plus top-1 among them: a prior that buys recall with the order of
the top is no help), never worse than the message alone in either measure on either fold, then
each weight is kept only if dropping it loses at least `MIN_GAIN`. A companion is worth a slot when it is needed more often than the tool the
ranking would show in that slot (the 95% lower bound of its rate above that tool's rate) and
brings every used tool into view on `MIN_GAIN` more of the turns: the share threshold is lowered while the companions it
adds are.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise, product
from typing import Literal

import numpy as np
import numpy.typing as npt

from toolselect.names import CatalogNames
from toolselect.ranker.relations import Relations
from toolselect.records import Turn, utc
from toolselect.store.session_rules import plan_sessions, session_expired, turn_tools

PRIOR_WEIGHTS = (0.0, 0.1, 0.2, 0.35, 0.5, 1.0)
CONTEXT_WEIGHTS = (0.0, 0.1, 0.2, 0.35, 0.5)
# The context is mixed in only when the message alone is this uncertain (its top-1/top-2
# margin below it); infinity: always.
INF = float("inf")
CONTEXT_MARGINS = (INF, 0.1, 0.05, 0.02)
COMPANION_SHARES = (0.5, 0.35, 0.25, 0.15, 0.1, 0.05)
MIN_GAIN = 0.005  # half a point of share@k: less is not evidence on a few hundred turns
MIN_FOLLOW_UPS = 20
MIN_COMPANIONS_SHOWN = 10
FIT_K = 5  # the rank route's default k
FIT_COMPANIONS = 2  # what `companions: true` asks for

Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class SessionWeights:
    """Fitted (or pinned) weights; `companion_share` None means no companion is offered."""

    prior: float = 0.0
    context: float = 0.0
    companion_share: float | None = None
    context_margin: float = float("inf")

    def uses_context(self, margin: Callable[[], float]) -> bool:
        """Whether the context is mixed into a request whose message alone has the `margin`
        (asked for only when a finite gate needs it: it costs a ranking)."""
        if self.context <= 0:
            return False
        return math.isinf(self.context_margin) or margin() < self.context_margin


NO_SESSION_WEIGHTS = SessionWeights()


FitResult = Literal["fitted", "no_sessions", "too_few_follow_ups"]


@dataclass(frozen=True, slots=True)
class SessionFit:
    """The weights and the validation figures behind them (`GET /v1/analytics/learning`)."""

    weights: SessionWeights = NO_SESSION_WEIGHTS
    sessions: int = 0
    turns: int = 0
    follow_ups: int = 0
    # Follow-ups, share@k plus top-1 (0..2) of the message alone, and with the chosen prior
    # and context.
    share_alone: float | None = None
    share_fitted: float | None = None
    companion_precision: float | None = None  # of the companions at the chosen share
    next_precision: float | None = None  # of ranks k+1..k+n, what companions compete with
    all_alone: float | None = None  # every used tool in the top k
    all_with_companions: float | None = None
    reason: str = "no sessions"
    grid: dict[str, float] = field(default_factory=dict)
    # What it came to, in a word (`toolselect_session_fits_total{result}`); `reason` says more.
    result: FitResult = "no_sessions"


@dataclass(frozen=True, slots=True)
class _Fold:
    relations: Relations
    rows: list[int]  # turns scored in this fold
    previous: list[int | None]  # each scored turn's previous turn in its session


@dataclass(frozen=True, slots=True)
class _Part:
    """One fold's scored turns as matrices (a row per turn, a column per tool): the message
    alone's scores, the previous turn's (the context), the prior from the other fold's
    relations, which rows follow another turn, the needed tools, the message alone's margin."""

    fold: _Fold
    rows: list[int]
    alone: Matrix
    context: Matrix
    prior: Matrix
    follow: npt.NDArray[np.bool_]
    needed: Matrix
    margin: npt.NDArray[np.float32]
    previous_tools: list[tuple[str, ...]]  # the tools of each row's previous turn


_Key = tuple[float, float, float]  # context weight, context margin gate, prior weight


def _part(
    fold: _Fold, turns: Sequence[Turn], queries: Matrix, cents: Matrix, column: dict[str, int]
) -> _Part:
    rows = [r for r in fold.rows if any(n in column for n in turn_tools(turns[r]))]
    place = {r: i for i, r in enumerate(fold.rows)}
    previous = [fold.previous[place[r]] for r in rows]
    alone = queries[rows] @ cents.T if rows else np.zeros((0, len(column)), np.float32)
    context = np.zeros_like(alone)
    prior = np.zeros_like(alone)
    for j, p in enumerate(previous):
        if p is None:
            continue
        context[j] = queries[p] @ cents.T
        for tool, share in fold.relations.prior(turn_tools(turns[p])).items():
            if tool in column:
                prior[j, column[tool]] = share
    follow = np.asarray([p is not None for p in previous], dtype=bool)
    needed = _needed(turns, rows, column)
    before = [turn_tools(turns[p]) if p is not None else () for p in previous]
    return _Part(fold, rows, alone, context, prior, follow, needed, margins(alone), before)


def sessions_of(turns: Sequence[Turn]) -> dict[str, list[int]]:
    """Indices of `turns` per session, in the order the stores chain them (time, then id)."""
    out: dict[str, list[int]] = {}
    for i in sorted(range(len(turns)), key=lambda i: (utc(turns[i].at), turns[i].id)):
        session = turns[i].session_id
        if session is not None:
            out.setdefault(session, []).append(i)
    return out


def _as_catalog_tools(turns: Sequence[Turn], catalog: CatalogNames) -> list[Turn]:
    """The turns with each tool they used as the catalog tool it stands for (a name agents
    report with a prefix is its tool's column), names that stand for none left as reported."""
    out = []
    for turn in turns:
        reported = turn_tools(turn)
        tools = tuple(catalog.resolve(name) or name for name in reported)
        if tools != reported:
            turn = replace(turn, used_tool=tools[0], used_tools=tools if turn.used_tools else ())
        out.append(turn)
    return out


def _folds(turns: Sequence[Turn], names: Sequence[str], idle_s: float) -> list[_Fold]:
    chains = sessions_of(turns)
    side = {s: zlib.crc32(s.encode()) % 2 for s in chains}
    folds = []
    for f in (0, 1):
        learn = [turns[i] for s, idx in chains.items() if side[s] != f for i in idx]
        plan = plan_sessions(learn, {}, CatalogNames(names), idle_s=idle_s)
        rows: list[int] = []
        previous: list[int | None] = []
        for s, idx in chains.items():
            if side[s] == f:
                rows.extend(idx)
                previous.append(None)
                # A turn after an idle gap follows nothing, as the stores and rankings have it.
                previous.extend(
                    None if session_expired(turns[p].at, turns[t].at, idle_s) else p
                    for p, t in pairwise(idx)
                )
        folds.append(_Fold(Relations(plan.pairs, plan.transitions), rows, previous))
    return folds


def _needed(turns: Sequence[Turn], rows: Sequence[int], column: dict[str, int]) -> Matrix:
    out = np.zeros((len(rows), len(column)), dtype=np.float32)
    for r, i in enumerate(rows):
        for name in turn_tools(turns[i]):
            if name in column:
                out[r, column[name]] = 1.0
    return out


def _share_at(scores: Matrix, needed: Matrix, k: int) -> npt.NDArray[np.float64]:
    """Per row, the share of its needed tools among its top `k` scores; ties go to the earlier
    column (columns are in name order, as the ranker breaks ties by name)."""
    k = min(k, scores.shape[1])
    kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1 : k]
    above = scores > kth
    tied = scores == kth
    room = k - above.sum(axis=1, keepdims=True)
    chosen = above | (tied & (np.cumsum(tied, axis=1) <= room))
    hits = (needed * chosen).sum(axis=1)
    return np.asarray(hits / np.maximum(needed.sum(axis=1), 1.0), dtype=np.float64)


def margins(scores: Matrix) -> npt.NDArray[np.float32]:
    """Top-1 minus top-2 score per row (the ranking's margin)."""
    if scores.shape[1] < 2:
        return np.ones(scores.shape[0], dtype=np.float32)
    two = -np.partition(-scores, 1, axis=1)[:, :2]
    return (two[:, 0] - two[:, 1]).astype(np.float32)


def _mix(
    alone: Matrix, context: Matrix, prior: Matrix, uncertain: npt.NDArray[np.bool_],
    wx: float, wp: float,
) -> Matrix:  # fmt: skip
    """The scores the service computes: the context mixed into the query of the `uncertain`
    rows, then the prior."""
    mixed = alone
    if wx:
        mixed = np.where(
            uncertain[:, None], (alone + np.float32(wx) * context) / np.float32(1 + wx), alone
        )
    out = (mixed + np.float32(wp) * prior) / np.float32(1 + wp) if wp else mixed
    return out.astype(np.float32, copy=False)


def fit_sessions(
    turns: Sequence[Turn],
    vectors: npt.NDArray[np.floating],
    matrix: npt.NDArray[np.floating],
    names: Sequence[str],
    *,
    idle_s: float,
    k: int = FIT_K,
    companions: int = FIT_COMPANIONS,
) -> SessionFit:
    """Weights for the session prior, the context and companions from `turns` (with their
    request `vectors`, row for row) against the centroids `matrix` (one row per `names`); a
    turn more than `idle_s` seconds after its session's previous one is no follow-up."""
    chains = sessions_of(turns)
    if not chains or not names:
        return SessionFit(reason="no sessions")
    # Columns in name order: ties then fall as the ranker breaks them (by name).
    order = sorted(range(len(names)), key=lambda i: names[i])
    names = [names[i] for i in order]
    turns = _as_catalog_tools(turns, CatalogNames(names))
    column = {name: i for i, name in enumerate(names)}
    cents = np.asarray(matrix, dtype=np.float32)[order]
    queries = np.asarray(vectors, dtype=np.float32)
    folds = _folds(turns, names, idle_s)
    parts = [_part(fold, turns, queries, cents, column) for fold in folds]
    follow_ups = sum(int(p.follow.sum()) for p in parts)
    scored = sum(len(p.rows) for p in parts)
    if follow_ups < MIN_FOLLOW_UPS or any(not p.rows for p in parts):
        return SessionFit(
            sessions=len(chains),
            turns=scored,
            follow_ups=follow_ups,
            reason=f"{follow_ups} follow-up turns with used catalog tools (fit from "
            f"{MIN_FOLLOW_UPS}, in both halves of the sessions)",
            result="too_few_follow_ups",
        )

    def follow_share(key: _Key) -> tuple[float, list[float]]:
        """Share@k plus top-1 on the follow-ups, over both folds and per fold."""
        wx, gate, wp = key
        per_fold = []
        for p in parts:
            f = p.follow
            mixed = _mix(p.alone[f], p.context[f], p.prior[f], p.margin[f] < gate, wx, wp)
            if not f.any():
                per_fold.append((0.0, 0.0))
                continue
            top1 = np.take_along_axis(p.needed[f], mixed.argmax(axis=1)[:, None], axis=1)
            per_fold.append((float(_share_at(mixed, p.needed[f], k).sum()), float(top1.sum())))
        shares = sum(v[0] for v in per_fold) / follow_ups
        top1s = sum(v[1] for v in per_fold) / follow_ups
        return shares + top1s, [v for pair in per_fold for v in pair]

    keys = [
        (wx, gate if wx else INF, wp)
        for wx, gate, wp in product(CONTEXT_WEIGHTS, CONTEXT_MARGINS, PRIOR_WEIGHTS)
        if wx or gate == INF
    ]
    grid = {key: follow_share(key) for key in keys}
    alone: _Key = (0.0, INF, 0.0)
    base, base_folds = grid[alone]
    # The best, the lightest weights and the narrowest gate on ties.
    best = max(grid, key=lambda key: (grid[key][0], -key[0] - key[2], -key[1]))
    # Worse than the message alone in either measure on either half, or not better by
    # MIN_GAIN: no evidence it helps.
    if grid[best][0] - base < MIN_GAIN or any(
        v < b for v, b in zip(grid[best][1], base_folds, strict=True)
    ):
        best = alone
    wx, gate, wp = best
    # Each signal must earn its place on its own.
    if wx and grid[best][0] - grid[(0.0, INF, wp)][0] < MIN_GAIN:
        wx, gate = 0.0, INF
    if wp and grid[best][0] - grid[(wx, gate, 0.0)][0] < MIN_GAIN:
        wp = 0.0
    chosen: _Key = (wx, gate, wp)
    companion = _companion_share(parts, chosen, k, companions, names)
    return SessionFit(
        weights=SessionWeights(wp, wx, companion[0], gate),
        sessions=len(chains),
        turns=scored,
        follow_ups=follow_ups,
        share_alone=base,
        share_fitted=grid[chosen][0],
        companion_precision=companion[1],
        next_precision=companion[2],
        all_alone=companion[3],
        all_with_companions=companion[4],
        reason="fitted",
        result="fitted",
        grid={
            f"context={a:g},margin<{g:g},prior={b:g}": round(v[0], 4)
            for (a, g, b), v in grid.items()
        },
    )


def _lower_bound(hits: int, n: int, z: float = 1.645) -> float:
    """The one-sided 95% Wilson lower bound of a rate of `hits` in `n`: a few lucky hits of
    companions drawn from noise do not beat the next ranks."""
    p = hits / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n)


def _companion_share(
    parts: Sequence[_Part], key: _Key, k: int, n: int, names: Sequence[str]
) -> tuple[float | None, float | None, float | None, float | None, float | None]:
    """The share threshold (lowered while the companions it adds are needed more often than
    ranks k+1..k+n), their precision, the next ranks' precision, and all@k without and with
    the companions."""
    wx, gate, wp = key
    next_hits = next_shown = turns = every_alone = 0
    per_share = {s: [0, 0] for s in COMPANION_SHARES}  # hits, shown
    every_with = dict.fromkeys(COMPANION_SHARES, 0)
    for p in parts:
        scores = _mix(p.alone, p.context, p.prior, p.margin < gate, wx, wp)
        depth = min(k + n, scores.shape[1])
        order = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
        for r in range(scores.shape[0]):
            want = {names[c] for c in np.flatnonzero(p.needed[r]).tolist()}
            ranked = [names[c] for c in order[r, :k].tolist()]
            extra = [names[c] for c in order[r, k:depth].tolist()]
            next_hits += sum(1 for t in extra if t in want)
            next_shown += len(extra)
            turns += 1
            every_alone += want <= set(ranked)
            previous = p.previous_tools[r]
            for s in COMPANION_SHARES:
                offered = [
                    c.tool for c in p.fold.relations.companions(ranked, n, s, None, previous)
                ]
                per_share[s][0] += sum(1 for t in offered if t in want)
                per_share[s][1] += len(offered)
                every_with[s] += want <= set(ranked) | set(offered)
    next_precision = next_hits / next_shown if next_shown else 0.0
    chosen: float | None = None
    before = (0, 0)
    for s in COMPANION_SHARES:  # highest share first: stop where the added ones stop paying
        hits, shown = per_share[s]
        added_hits, added = hits - before[0], shown - before[1]
        if added and _lower_bound(added_hits, added) <= next_precision:
            break
        if shown >= MIN_COMPANIONS_SHOWN:
            chosen = s
        before = (hits, shown)
    # And they must bring every used tool into view on at least MIN_GAIN more turns.
    if chosen is not None and every_with[chosen] - every_alone < MIN_GAIN * turns:
        chosen = None
    if chosen is None:
        return None, None, next_precision, every_alone / turns, every_alone / turns
    hits, shown = per_share[chosen]
    return chosen, hits / shown, next_precision, every_alone / turns, every_with[chosen] / turns
