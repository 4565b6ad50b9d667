"""What the teacher is shown for a turn: the tools it chooses among (pure; no I/O).

The whole catalog (or the turn's pack) when small, else the ranked top `depth` (the tuner sizes
it from the labels so it holds the true tool), fitted to the token budget. The tools the agent
was shown and passed over go last: the budget buys deeper candidates first, yet a search that
showed nearly everything still leaves the teacher the tools to choose from.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import numpy as np

from toolselect.oracle.base import Candidate, within_budget
from toolselect.ranker import CentroidRanker, Ranking


def rank_for_turn(ranker: CentroidRanker, vector: np.ndarray, pack: str | None, k: int) -> Ranking:
    """The top `k` for one turn: within its pack when the pack has tools, else over the whole
    catalog."""
    if pack:
        in_pack = ranker.rank(vector, k, pack=pack)
        if in_pack.results:
            return in_pack
    return ranker.rank(vector, k)


def teacher_candidates(
    ranker: CentroidRanker,
    vector: np.ndarray,
    pack: str | None,
    passed: Collection[str],
    *,
    depth: int,
    full_catalog: int,
    max_tokens: int,
    describe: Callable[[str], str],
) -> list[Candidate]:
    """The candidates for one turn (see the module docstring); `passed` are the tools the agent
    was shown and used none of."""
    snapshot = ranker.snapshot
    in_pack = snapshot.packs.get(pack) if pack else None
    size = in_pack.size if in_pack is not None and in_pack.size else snapshot.size
    if size <= full_catalog:
        names = rank_for_turn(ranker, vector, pack, size).tools
    else:
        skip = set(passed)
        ranked = rank_for_turn(ranker, vector, pack, min(depth + len(skip), size)).tools
        unseen = [name for name in ranked if name not in skip]
        names = tuple([*unseen, *(name for name in ranked if name in skip)][:depth])
    return within_budget([Candidate(name, describe(name)) for name in names], max_tokens)
