"""The benchmarks' one percentile: every p50, p90, p99 and median they report is `percentile`,
most of them through `summary`.

numpy's linear interpolation between the two nearest ranks, so 0.5 is the median of an even
count too (the mean of the middle two, where a nearest-rank cut would take the upper one).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def percentile(values: Iterable[float], q: float) -> float:
    """The `q` quantile (0 <= q <= 1) of `values`; ValueError when there are none."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"expected q in 0..1, got {q}")
    array = np.fromiter(values, dtype=np.float64)
    if not array.size:
        raise ValueError("expected at least one value")
    return float(np.percentile(array, 100 * q))


def summary(
    values: Sequence[float],
    quantiles: Sequence[float] = (0.5, 0.9),
    *,
    scale: float = 1.0,
    unit: str = "",
    digits: int = 3,
) -> dict[str, float]:
    """`n` and the quantiles of `values` times `scale`, keyed `p50{unit}`, `p90{unit}`, ..."""
    return {
        "n": len(values),
        **{
            f"p{round(100 * q)}{unit}": round(percentile(values, q) * scale, digits)
            for q in quantiles
        },
    }
