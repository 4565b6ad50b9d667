"""A batch of observed turns ranked and checked on one snapshot: pure, no I/O.

The intake worker embeds a batch, then `prepare` ranks every turn (top-1 and margin) on one
ranker snapshot and runs the detector on it. The snapshot is kept with the result so the worker
can tell when a fold has replaced it before the batch is written, and rank the batch again.
Each used tool is read as the catalog tool it stands for (`names.CatalogNames`) before the
detector compares it with the ranker's top-1, which is a catalog name.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from toolselect.learn.detect import Flag, RankSignal, detect
from toolselect.learn.records import Observation
from toolselect.names import catalog_names, is_blank
from toolselect.ranker import Ranking, Snapshot


@dataclass(frozen=True, slots=True)
class Prepared:
    """A batch ranked and checked on one snapshot, ready for the store."""

    batch: Sequence[Observation]
    vectors: np.ndarray
    snapshot: Snapshot
    floor: float
    rankings: list[Ranking]
    signals: list[RankSignal | None]
    flags: list[Flag | None]
    used: list[str]  # each turn's used tool as the catalog tool it stands for, else as reported


def prepare(
    batch: Sequence[Observation],
    vectors: np.ndarray,
    snapshot: Snapshot,
    *,
    floor: float,
    fallback_tools: Collection[str],
) -> Prepared:
    """Rank every turn of the batch on `snapshot` and run the detector with margin `floor`.
    A blank request ranks nothing: its scores are all zero, and the first tool by name would
    be recorded as its top-1 (and stop counting as a tool nothing pointed at)."""
    rankings = rank_batch(snapshot, vectors, batch)
    signals = [
        RankSignal(ranking.results[0].tool, ranking.margin)
        if ranking.results and not is_blank(obs.request)
        else None
        for obs, ranking in zip(batch, rankings, strict=True)
    ]
    catalog = catalog_names(snapshot.names)
    used = [catalog.resolve(obs.used_tool) or obs.used_tool for obs in batch]
    flags = [
        detect(
            obs.request,
            used_tool,
            signal,
            fallback_tools=fallback_tools,
            margin_floor=floor,
            outcome=obs.outcome,
        )
        for obs, used_tool, signal in zip(batch, used, signals, strict=True)
    ]
    return Prepared(batch, vectors, snapshot, floor, rankings, signals, flags, used)


def rank_batch(
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
        for i, in_pack in zip(rows, snapshot.rank_many(vectors[rows], k, pack=pack), strict=True):
            if in_pack.results:
                rankings[i] = in_pack
    return rankings
