"""The cut of candidate scores to the top k, with the tie and margin rules every ranking obeys.

`top` ranks one query's scores; `top_many` ranks a batch of them with one partition and one sort
for all rows, and falls back to `top` for the rows where ties make the order depend on names.
Both clamp scores to [-1, 1] (float32 rounding can step just outside) and compute the margin over
at least two candidates, before the cut to `k`.
"""

from __future__ import annotations

import heapq

import numpy as np
import numpy.typing as npt

from toolselect.ranker.records import Ranked, Ranking, Rows


def top(
    scores: npt.NDArray[np.float32], rows: Rows | None, names: tuple[str, ...], k: int
) -> Ranking:
    """The best `k` of `scores` (indexed by `rows`, or by row when None), ties by name."""

    def name_at(i: int) -> str:
        return names[int(rows[i])] if rows is not None else names[i]

    count = scores.size
    # At least two, so the margin exists even when k is 1.
    take = min(max(k, 2), count)
    if take < count:
        kept = np.argpartition(scores, count - take)[count - take :]
        floor = scores[kept].min()
        above = np.flatnonzero(scores > floor)
        ties = np.flatnonzero(scores == floor)
        needed = take - above.size
        if ties.size > needed:
            # Which tied candidates make the cut must not depend on argpartition's whims.
            ties = np.asarray(heapq.nsmallest(needed, ties.tolist(), key=name_at), dtype=np.intp)
        chosen = np.concatenate((above, ties))
    else:
        chosen = np.arange(count)
    picked = [(min(max(float(scores[i]), -1.0), 1.0), name_at(int(i))) for i in chosen]
    picked.sort(key=lambda pair: (-pair[0], pair[1]))
    margin = picked[0][0] - picked[1][0] if len(picked) >= 2 else max(picked[0][0], 0.0)
    return Ranking(tuple(Ranked(name, score) for score, name in picked[:k]), margin)


def top_many(
    scores: npt.NDArray[np.float32], rows: Rows | None, names: tuple[str, ...], k: int
) -> list[Ranking]:
    """`top` of every row of `scores`, the partition and sort done for all rows at once.

    A row whose best candidates hold equal scores (after clamping), whose cut-off score is
    shared by another candidate, or which holds a non-finite score goes through `top`, whose
    tie rule (by name) then decides; every other row has one possible answer, built here."""
    count, width = scores.shape
    take = min(max(k, 2), width)
    if take < width:
        best = np.argpartition(scores, width - take, axis=1)[:, width - take :]
    else:
        best = np.broadcast_to(np.arange(width), (count, width))
    top_scores = np.take_along_axis(scores, best, axis=1)
    order = np.argsort(-top_scores, axis=1, kind="stable")
    best = np.take_along_axis(best, order, axis=1)
    top_scores = np.clip(np.take_along_axis(top_scores, order, axis=1), -1.0, 1.0)
    clean = np.asarray(
        np.isfinite(scores).all(axis=1) & (np.diff(top_scores, axis=1) < 0).all(axis=1)
    )
    if take < width:
        clean &= np.asarray((scores == top_scores[:, -1:]).sum(axis=1) == 1)
    found = best[:, :k] if rows is None else rows[best[:, :k]]
    rankings: list[Ranking] = []
    for i, (values, at) in enumerate(zip(top_scores.tolist(), found.tolist(), strict=True)):
        if not clean[i]:
            rankings.append(top(scores[i], rows, names, k))
            continue
        margin = values[0] - values[1] if len(values) >= 2 else max(values[0], 0.0)
        ranked = tuple(Ranked(names[j], v) for j, v in zip(at, values, strict=False))
        rankings.append(Ranking(ranked, margin))
    return rankings
