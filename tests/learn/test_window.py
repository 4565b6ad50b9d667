"""The tuner's sliding window answers numpy's quantile exactly, through evictions and ties."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolselect.learn.window import SortedWindow


@given(
    values=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=60),
    size=st.integers(min_value=1, max_value=25),
    q=st.floats(min_value=0.0, max_value=1.0),
)
def test_quantile_is_numpys_over_the_last_values(values: list[float], size: int, q: float) -> None:
    window = SortedWindow(size)
    for i, value in enumerate(values):
        window.add(value)
        recent = values[max(0, i + 1 - size) : i + 1]
        assert len(window) == len(recent)
        assert window.quantile(q) == float(np.quantile(np.asarray(recent), q))


def test_a_full_window_of_repeated_values_evicts_one_copy_at_a_time() -> None:
    rng = random.Random(7)
    values = [rng.choice([0.1, 0.5, 0.9]) for _ in range(3000)]
    window = SortedWindow(1000)
    for value in values:
        window.add(value)
    for q in (0.0, 0.25, 0.3, 0.5, 0.99, 1.0):
        assert window.quantile(q) == float(np.quantile(values[-1000:], q))


def test_an_empty_window_has_no_quantile_and_a_window_holds_something() -> None:
    with pytest.raises(ValueError, match="no values"):
        SortedWindow(3).quantile(0.5)
    with pytest.raises(ValueError, match="size >= 1"):
        SortedWindow(0)
