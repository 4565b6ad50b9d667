"""PromptKit selection: the chosen candidate IDs among those an agent runtime offers.

Pure (numpy in, values out): the service and the one-shot exec selector (`toolselect select`)
both choose with `choose`, so the two answer alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from toolselect.errors import InvalidInput
from toolselect.names import is_blank
from toolselect.ranker import CentroidRanker, Ranked
from toolselect.ranker.relations import Companion
from toolselect.records import Tool

DEFAULT_K = 5


@dataclass(frozen=True, slots=True)
class Selection:
    """The chosen candidate IDs, best first, and why; `margin` is top-1 minus top-2 over every
    candidate (the ranker's rule); `companions` are candidates often used with the chosen ones
    (the service's, when asked for)."""

    selected: list[str]
    reason: str
    search_id: str | None = None
    margin: float = 0.0
    companions: tuple[Companion, ...] = ()


def check_text(text: str, field: str, max_bytes: int) -> None:
    """`InvalidInput` for a blank text (`names.is_blank`) or one longer than `max_bytes` of
    UTF-8."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if is_blank(text):
        raise InvalidInput(f"expected a non-empty {field}", field)
    if size > max_bytes:
        raise InvalidInput(f"expected {field} of at most {max_bytes} bytes, got {size}", field)


def choose(
    ranker: CentroidRanker,
    query: npt.NDArray[np.float32],
    candidates: Sequence[Tool],
    unknown_vectors: npt.NDArray[np.float32] | None,
    k: int,
    max_k: int,
    *,
    prior: Mapping[str, float] | None = None,
    prior_weight: float = 0.0,
) -> Selection:
    """At most `k` candidates (5 when `k` <= 0, never more than `max_k`), best first.

    Candidates the ranker holds are scored against their centroids (description and learned
    exemplars); the others against `unknown_vectors`, their own descriptions' vectors, one row
    per unknown candidate in candidate order. A `prior` (per name, in [0, 1]) with a positive
    `prior_weight` mixes into every candidate's score as the ranker mixes it. Ties go to the
    smaller name.
    """
    if k <= 0:
        k = DEFAULT_K
    k = min(k, max_k)
    if not candidates:
        return Selection([], "no candidates")
    known = [c.name for c in candidates if ranker.has(c.name)]
    scored: list[Ranked] = []
    if known:
        ranked = ranker.rank(
            query, len(known), restrict=known, prior=prior, prior_weight=prior_weight
        )
        scored += ranked.results
    unknown = [c for c in candidates if not ranker.has(c.name)]
    if unknown:
        if unknown_vectors is None or len(unknown_vectors) != len(unknown):
            raise ValueError(
                f"expected one vector per unknown candidate ({len(unknown)}), got "
                f"{0 if unknown_vectors is None else len(unknown_vectors)}"
            )
        scores = unknown_vectors @ query
        if prior and prior_weight > 0.0:
            bonus = np.asarray([prior.get(c.name, 0.0) for c in unknown], dtype=np.float32)
            scores = (scores + np.float32(prior_weight) * bonus) / np.float32(1 + prior_weight)
        scored += [Ranked(c.name, float(s)) for c, s in zip(unknown, scores, strict=True)]
    scored.sort(key=lambda r: (-r.score, r.tool))
    top = scored[:k]
    margin = top[0].score - top[1].score if len(top) > 1 else (top[0].score if top else 0.0)
    how = "centroid ranking" if not unknown else "centroid ranking + candidate descriptions"
    every = scored[0].score - scored[1].score if len(scored) > 1 else max(top[0].score, 0.0)
    return Selection([r.tool for r in top], f"{how}, margin {margin:.2f}", margin=every)
