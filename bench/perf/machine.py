"""What the machine is and how busy it is: CPU accounting from /proc, waiting for quiet, facts.

The machine is shared, so every section records the cores other processes used while it ran.
"""

from __future__ import annotations

import os
import platform
import time
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


def machine_facts() -> dict[str, Any]:
    """What the numbers depend on: CPU, cores, memory, Python, numpy's BLAS and its threads."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except OSError:
        mem_kb = 0
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
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
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
