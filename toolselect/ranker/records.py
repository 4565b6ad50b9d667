"""The values the ranker takes and gives: rankings, learned exemplars and the view a fit reads.

Plain frozen records with no behaviour beyond convenience properties, so callers that only pass
rankings around (the selection endpoint, the learner) need not know how they are computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from toolselect.records import LabelGroup

Vector = npt.NDArray[np.float32]
Group = LabelGroup
Rows = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class Ranked:
    tool: str
    score: float


@dataclass(frozen=True, slots=True)
class Ranking:
    """Results by descending cosine; `margin` is top-1 minus top-2 over all candidates.

    The margin is computed before the cut to `k`, so `k=1` still tells how clear the winner
    was. With one candidate the margin is its score (0 when negative); with none, 0.
    """

    results: tuple[Ranked, ...]
    margin: float

    @property
    def top(self) -> Ranked | None:
        return self.results[0] if self.results else None

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(r.tool for r in self.results)


EMPTY_RANKING = Ranking((), 0.0)


@dataclass(frozen=True, slots=True)
class LearnedVector:
    """An exemplar as the ranker needs it: its normalised query, its tool, its vector, and
    where its label comes from: trusted (a teacher's or a human's), usage (an agent's successful
    choice), or else the ranker's own top-1."""

    query_norm: str
    tool: str
    vector: npt.NDArray[np.floating]
    trusted: bool = False
    usage: bool = False

    @property
    def group(self) -> Group:
        return "trusted" if self.trusted else "usage" if self.usage else "own"


@dataclass(frozen=True, slots=True)
class LabelView:
    """What a fit needs from the ranker, copied at one instant.

    `descriptions[i]` is tool `i`'s description vector; `sums[j]`/`counts[j]` the sum and count
    of the trusted exemplars of tool `sum_rows[j]`, `usage_sums[j]`/`usage_counts[j]` those of
    the agents' usage labels, `own_sums[j]`/`own_counts[j]` those of the ranker's own labels
    (only tools with exemplars); `vectors[v]` an exemplar whose tool is row `owners[v]`, already
    folded into that tool's trusted sum when `trusted[v]`, its usage sum when `usage[v]`, else
    its own.
    """

    descriptions: npt.NDArray[np.float32]
    sum_rows: Rows
    sums: npt.NDArray[np.float64]
    counts: npt.NDArray[np.float64]
    vectors: npt.NDArray[np.float32]
    owners: Rows
    own_sums: npt.NDArray[np.float64]
    own_counts: npt.NDArray[np.float64]
    trusted: npt.NDArray[np.bool_]
    usage_sums: npt.NDArray[np.float64]
    usage_counts: npt.NDArray[np.float64]
    usage: npt.NDArray[np.bool_]

    @property
    def validating(self) -> npt.NDArray[np.bool_]:
        """The labels whose truth does not come from the ranker: trusted ones, and the agents'
        usage labels (what the ranker should predict) when there is no trusted label."""
        return self.trusted if self.trusted.any() else self.usage

    @property
    def size(self) -> int:
        """Labels a fit validates on (`validating`)."""
        return int(self.validating.sum())
