"""Per-call timing and its summary (medians and tails in milliseconds)."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

from threadpoolctl import threadpool_limits

from bench.stats import summary


def summarise(seconds: list[float]) -> dict[str, float]:
    """Median, p90, p99 and mean in milliseconds."""
    ms = summary(seconds, (0.5, 0.9, 0.99), scale=1e3, unit="_ms", digits=4)
    return {**ms, "mean_ms": round(statistics.fmean(seconds) * 1e3, 4)}


@contextmanager
def blas_threads(limit: int | None) -> Iterator[None]:
    with threadpool_limits(limits=limit) if limit else nullcontext():
        yield


def timed(fn: Callable[[int], object], iterations: int, warmup: int = 50) -> list[float]:
    """Per-call wall times of `fn(i)`; the collector is paused so it does not pick a victim."""
    for i in range(warmup):
        fn(i)
    out = []
    gc.disable()
    try:
        for i in range(iterations):
            t0 = time.perf_counter()
            fn(i)
            out.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return out
