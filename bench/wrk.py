"""`wrk`, the compiled load generator the throughput benches use, driven for `/v1/rank`: one
script writer and one runner, so every figure they publish is read from wrk's output one way."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

CONNECTIONS = 16
MISSING = "wrk is not installed (Debian: apt-get install wrk)"
_SCALE = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def rank_script(queries: Sequence[str], keys: Sequence[str] = (), k: int = 5) -> str:
    """A wrk Lua script POSTing `/v1/rank` with the queries in turn and, when given, the agent
    keys in turn (one key or ten: the same script, so arms differ only in the keys)."""
    bodies = ",\n".join(json.dumps(json.dumps({"query": q, "k": k})) for q in queries)
    auth = [f', ["Authorization"] = "Bearer {key}"' for key in keys] or [""]
    heads = ",\n".join(f'{{["Content-Type"] = "application/json"{a}}}' for a in auth)
    return (
        f"local bodies = {{\n{bodies}\n}}\nlocal heads = {{\n{heads}\n}}\n"
        "local i, j = 0, 0\n"
        "request = function()\n"
        "  i = i % #bodies + 1\n"
        "  j = j % #heads + 1\n"
        '  return wrk.format("POST", "/v1/rank", heads[j], bodies[i])\n'
        "end\n"
    )


def run(url: str, script: Path, duration: int) -> dict[str, float]:
    """wrk for `duration` seconds (one thread, `CONNECTIONS` connections): req/s, wrk's p50 and
    p99 in ms, and the non-2xx answers."""
    argv = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{duration}s", "--latency", "-s", str(script)]
    out = subprocess.run(
        [*argv, url], capture_output=True, text=True, timeout=duration + 60, check=True
    ).stdout

    def latency(q: str) -> float:
        found = re.search(rf"\s{q}%\s+([\d.]+)(us|ms|s)\b", out)
        return float(found.group(1)) * _SCALE[found.group(2)] if found else float("nan")

    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "p50_ms": latency("50"),
        "p99_ms": latency("99"),
        "non_2xx": float(errors.group(1)) if errors else 0.0,
    }


def installed() -> bool:
    return shutil.which("wrk") is not None


def version() -> str:
    """wrk's first line of `wrk -v` (its version and event loop)."""
    return subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")[0]
