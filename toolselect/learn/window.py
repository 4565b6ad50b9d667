"""A sliding window of numbers that answers a quantile without sorting it again.

The tuner asks for a quantile of the recent flagged turns' probabilities once per flagged turn;
`numpy.quantile` over a 1,000-value window cost ~0.2 ms a call, nearly half of the labeller's
own CPU time in a flagged batch. Kept sorted beside the window, a quantile is two reads.
"""

from __future__ import annotations

import bisect
import math
from collections import deque


class SortedWindow:
    """The last `size` values added, in arrival order and sorted."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"expected size >= 1, got {size}")
        self._arrived: deque[float] = deque()
        self._sorted: list[float] = []
        self._size = size

    def __len__(self) -> int:
        return len(self._arrived)

    def add(self, value: float) -> None:
        if len(self._arrived) == self._size:
            oldest = self._arrived.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, oldest)]
        self._arrived.append(value)
        bisect.insort(self._sorted, value)

    def quantile(self, q: float) -> float:
        """`numpy.quantile(values, q)` (its default, linear method), bit for bit."""
        values = self._sorted
        if not values:
            raise ValueError("no values in the window")
        index = (len(values) - 1) * q
        below = math.floor(index)
        a = values[below]
        b = values[min(below + 1, len(values) - 1)]
        t = index - below
        # numpy's _lerp: from the nearer end, so t = 1 gives exactly b
        return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t
