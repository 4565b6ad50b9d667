"""The benchmarks' one percentile: every p50, p90, p99 and median they report is `percentile`.

Linear interpolation between the two nearest ranks, numpy's default (`np.percentile`) to the
last bit, so 0.5 is the median of an even count too (the mean of the middle two, where a
nearest-rank cut would take the upper one).
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """The `q` quantile (0 <= q <= 1) of `values`; ValueError when there are none."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"expected q in 0..1, got {q}")
    ordered = sorted(values)
    if not ordered:
        raise ValueError("expected at least one value")
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    below, above, t = ordered[low], ordered[high], position - low
    # numpy's lerp: from the nearer end, so t = 1 gives `above` exactly.
    gap = above - below
    return float(above - gap * (1.0 - t) if t >= 0.5 else below + gap * t)
