"""The benchmarks' one percentile agrees with numpy's to the bit, and is the median at 0.5."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bench.stats import percentile


def test_percentile_is_numpys_linear_interpolation() -> None:
    rng = random.Random(7)
    for _ in range(500):
        values = [rng.lognormvariate(0, 1) for _ in range(rng.randint(1, 40))]
        for q in (0.0, 0.25, 0.5, 0.9, 0.99, 1.0):
            assert percentile(values, q) == float(np.percentile(values, q * 100))


def test_small_samples() -> None:
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([4.0, 1.0], 0.5) == 2.5  # the median of an even count
    assert percentile(iter([1.0, 2.0, 3.0, 4.0, 5.0]), 0.9) == pytest.approx(4.6)
    with pytest.raises(ValueError):
        percentile([], 0.5)
    with pytest.raises(ValueError):
        percentile([1.0], 90)
