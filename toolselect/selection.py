"""PromptKit selection: the chosen candidate IDs among those an agent runtime offers.

Pure (numpy in, values out): the service and the one-shot exec selector (`toolselect select`)
both choose with `choose`, so the two answer alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from toolselect.errors import InvalidInput
from toolselect.ranker import CentroidRanker, Ranked
from toolselect.records import Tool

DEFAULT_K = 5


@dataclass(frozen=True, slots=True)
class Selection:
    selected: list[str]
    reason: str
    search_id: str | None = None


def check_text(text: str, field: str, max_bytes: int) -> None:
    """`InvalidInput` for a blank text or one longer than `max_bytes` of UTF-8."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if not text.strip():
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
) -> Selection:
    """At most `k` candidates (5 when `k` <= 0, never more than `max_k`), best first.

    Candidates the ranker holds are scored against their centroids (description and learned
    exemplars); the others against `unknown_vectors`, their own descriptions' vectors, one row
    per unknown candidate in candidate order. Ties go to the smaller name.
    """
    if k <= 0:
        k = DEFAULT_K
    k = min(k, max_k)
    if not candidates:
        return Selection([], "no candidates")
    known = [c.name for c in candidates if ranker.has(c.name)]
    scored: list[Ranked] = list(
        ranker.rank(query, len(known), restrict=known).results if known else ()
    )
    unknown = [c for c in candidates if not ranker.has(c.name)]
    if unknown:
        if unknown_vectors is None or len(unknown_vectors) != len(unknown):
            raise ValueError(
                f"expected one vector per unknown candidate ({len(unknown)}), got "
                f"{0 if unknown_vectors is None else len(unknown_vectors)}"
            )
        scores = unknown_vectors @ query
        scored += [Ranked(c.name, float(s)) for c, s in zip(unknown, scores, strict=True)]
    scored.sort(key=lambda r: (-r.score, r.tool))
    top = scored[:k]
    margin = top[0].score - top[1].score if len(top) > 1 else (top[0].score if top else 0.0)
    how = "centroid ranking" if not unknown else "centroid ranking + candidate descriptions"
    return Selection([r.tool for r in top], f"{how}, margin {margin:.2f}")
