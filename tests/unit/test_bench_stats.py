"""The benchmarks' one percentile is numpy's, the median at 0.5, and refuses what has none."""

from __future__ import annotations

import pytest

from bench.stats import percentile, summary


def test_quantiles_interpolate_linearly_between_ranks() -> None:
    # Worked by hand: position q * (n - 1) in the sorted values, linear between its neighbours.
    values = [10.0, 40.0, 20.0, 30.0]  # sorted: 10, 20, 30, 40
    expected = {0.0: 10.0, 0.25: 17.5, 0.5: 25.0, 0.9: 37.0, 0.99: 39.7, 1.0: 40.0}
    for q, value in expected.items():
        assert percentile(values, q) == pytest.approx(value, abs=1e-12)


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
