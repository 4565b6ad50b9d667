"""The benchmarks' one percentile is numpy's, the median at 0.5, and refuses what has none."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bench.stats import percentile, summary


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


def test_summary_names_each_quantile_in_its_unit() -> None:
    seconds = [0.004, 0.001, 0.002, 0.003]
    assert summary(seconds, scale=1e3) == {"n": 4, "p50": 2.5, "p90": 3.7}
    assert summary(seconds, (0.5, 0.99), scale=1e3, unit="_ms", digits=4) == {
        "n": 4,
        "p50_ms": 2.5,
        "p99_ms": 3.97,
    }
