"""Section `cold`: `toolselect select` spawned per call, as an agent runtime runs it.

The thin `--url` client against the interpreter's own start-up, the in-process `select`, and
`python -X importtime` of one `--url` call to show where its start-up goes.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from typing import Any

from bench.perf.catalog import SEED, synth_queries
from bench.perf.server import TOOLSELECT, ServerProcess
from bench.perf.timing import summarise


def _spawn_times(
    argv: list[str], env: dict[str, str], stdin: str, calls: int, *, answer: bool = True
) -> list[float]:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        done = subprocess.run(argv, input=stdin, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[1:3]} failed: {done.stderr.strip()}")
        if answer:
            json.loads(done.stdout)  # a real answer, not an empty line
    return times


def importtime_top(argv: list[str], env: dict[str, str], stdin: str, top: int = 12) -> list[Any]:
    """The top-level imports of one `--url` call by cumulative time (`python -X importtime`)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rows: list[dict[str, Any]] = []
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
        if m and not m.group(3):  # not indented: imported by the program itself
            rows.append({"module": m.group(4), "self_ms": int(m.group(1)) / 1e3,
                         "cumulative_ms": int(m.group(2)) / 1e3})  # fmt: skip
    rows.sort(key=lambda r: -r["cumulative_ms"])
    total = round(sum(r["cumulative_ms"] for r in rows), 1)
    return [{"total_import_ms": total}, *rows[:top]]


def bench_cold(server: ServerProcess, catalog: list[dict[str, Any]], quick: bool) -> dict[str, Any]:
    """Per-call wall time of a spawned `select` (thin `--url` client and in-process)."""
    rng = random.Random(SEED + 2)
    picked = rng.sample(catalog, 20)
    request = json.dumps(
        {
            "query": {"Text": synth_queries(picked, 1)[0], "Kind": "tool", "K": 5},
            "candidates": [
                {"ID": t["name"], "Name": t["name"], "Description": t["description"]}
                for t in picked
            ],
        }
    )
    env = dict(server.env)
    url_argv = [TOOLSELECT, "select", "--url", server.url]
    calls = 8 if quick else 30
    _spawn_times(url_argv, env, request, 2)  # page cache warm
    url_times = _spawn_times(url_argv, env, request, calls)
    python_times = _spawn_times([sys.executable, "-c", "pass"], env, "", calls, answer=False)
    local_times = _spawn_times([TOOLSELECT, "select"], env, request, 3 if quick else 10)
    result: dict[str, Any] = {
        "calls": calls,
        "select_url": summarise(url_times),
        "python_startup": summarise(python_times),
        "select_in_process": summarise(local_times),
        "importtime_url": importtime_top(url_argv, env, request),
        "catalog_tools": 1000,
        "candidates": 20,
    }
    print(
        f"  cold: select --url p50 {result['select_url']['p50_ms']:.1f} ms "
        f"(python -c pass {result['python_startup']['p50_ms']:.1f} ms), "
        f"in-process p50 {result['select_in_process']['p50_ms']:.0f} ms",
        flush=True,
    )
    return result
