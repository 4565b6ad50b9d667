"""`vegeta`, the compiled load generator (Go) the latency benches drive: one process beside the
server, so the measuring never shares a GIL or a Python loop with what it measures.

Two ways to drive it, read back the same way (vegeta's own result for every request, so a p99
here is ours, computed by `bench.stats`, over exactly the measured window):

- `closed(..., clients=N)`: N workers, each sending its next request when the previous one
  answered (vegeta's `-rate=0` with N workers).
- `open_loop(..., rate=R)`: requests leave at R a second whatever the server does. A request's
  latency counts from its *scheduled* send time (request n is due n/R seconds into the run),
  so a stalled server shows as latency instead of silently slowing the sender down (no
  coordinated omission).

Requests cycle through the given `(path, JSON body)` targets in order; only loopback URLs are
accepted. `install` builds the binary into .venv/bin with `go install` the first time.
"""

from __future__ import annotations

import base64
import csv
import json
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench import ROOT
from bench.stats import percentile, summary

MODULE = "github.com/tsenart/vegeta/v12@v12.13.0"
MISSING = f"vegeta is not installed and could not be built (needs Go: go install {MODULE})"
_BIN = ROOT / ".venv" / "bin"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
# More in flight than this and the server is past saturation: vegeta then sends late, which
# the scheduled-time latency still counts.
MAX_INFLIGHT = 2000


def binary() -> str | None:
    """vegeta on PATH or in the project's .venv/bin (where `install` puts it)."""
    return shutil.which("vegeta", path=os.pathsep.join([str(_BIN), os.environ.get("PATH", "")]))


def install() -> str | None:
    """vegeta, built into .venv/bin with `go install` (~20 s) when it is missing and Go is
    there; None when it cannot be had (go's own error is on stderr)."""
    if binary() is None and shutil.which("go") is not None:
        subprocess.run(["go", "install", MODULE], env={**os.environ, "GOBIN": str(_BIN)})
    return binary()


def version() -> str:
    """`vegeta v12.13.0`: the module's version from the binary's build information (`vegeta
    -version` is blank in a `go install` build)."""
    found = binary()
    if found is None or shutil.which("go") is None:
        return "vegeta"
    info = subprocess.run(["go", "version", "-m", found], capture_output=True, text=True).stdout
    module = re.search(r"^\s*mod\s+\S+\s+(\S+)", info, re.MULTILINE)
    return f"vegeta {module.group(1)}" if module else "vegeta"


def closed(
    url: str, targets: Sequence[tuple[str, object]], clients: int, duration: float, warmup: float
) -> dict[str, Any]:
    """`clients` closed-loop workers for `warmup` + `duration` seconds; the measured window's
    figures (see `_summary`)."""
    flags = ["-rate=0", f"-workers={clients}", f"-max-workers={clients}"]
    return _attack(url, targets, flags, duration, warmup, rate=None) | {
        "mode": "closed",
        "concurrency": clients,
    }


def open_loop(
    url: str, targets: Sequence[tuple[str, object]], rate: float, duration: float, warmup: float
) -> dict[str, Any]:
    """Requests at a fixed `rate` for `warmup` + `duration` seconds, latency from each one's
    scheduled send time; the measured window's figures (see `_summary`)."""
    flags = [f"-rate={rate:g}/1s", f"-max-workers={MAX_INFLIGHT}"]
    return _attack(url, targets, flags, duration, warmup, rate=rate) | {
        "mode": "open",
        "rate": rate,
    }


def _attack(
    url: str,
    targets: Sequence[tuple[str, object]],
    flags: list[str],
    duration: float,
    warmup: float,
    rate: float | None,
) -> dict[str, Any]:
    host = urlsplit(url).hostname or ""
    if host not in _LOOPBACK:
        raise SystemExit(f"vegeta: refusing a non-loopback target {host!r}")
    found = binary()
    if found is None:
        raise SystemExit(MISSING)
    with tempfile.TemporaryDirectory(prefix="toolselect-vegeta-") as tmp:
        target_file = Path(tmp) / "targets.jsonl"
        target_file.write_text(
            "".join(
                json.dumps({
                    "method": "POST",
                    "url": url + path,
                    "body": base64.b64encode(json.dumps(body).encode()).decode(),
                    "header": {"Content-Type": ["application/json"]},
                }) + "\n"
                for path, body in targets
            ),
            encoding="utf-8",
        )  # fmt: skip
        results = Path(tmp) / "results.bin"
        attack = [
            *(found, "attack", "-format=json", f"-targets={target_file}", f"-output={results}"),
            *("-timeout=10s", "-max-body=0", f"-duration={warmup + duration:g}s", *flags),
        ]
        cpu0, wall0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(attack, check=True, timeout=warmup + duration + 120)
        wall = time.perf_counter() - wall0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        encoded = subprocess.run(
            [found, "encode", "-to=csv", str(results)], capture_output=True, text=True, check=True
        ).stdout
    rows = [(int(r[0]), int(r[1]), int(r[2]), r[5], int(r[8]), r[10])
            for r in csv.reader(encoded.splitlines())]  # fmt: skip
    return _summary(rows, duration, warmup, rate) | {
        # Over the whole run (warm-up included): how much of the cores the generator took.
        "client_cpu_s": round((cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime), 2),
        "client_wall_s": round(wall, 2),
    }


def _summary(
    rows: list[tuple[int, int, int, str, int, str]],
    duration: float,
    warmup: float,
    rate: float | None,
) -> dict[str, Any]:
    """Rows of (sent ns, status, latency ns, error, seq, url): the requests due after the
    warm-up (sent after it, in a closed loop) and answered, their latency, statuses and error
    kinds, per path and in all.

    In an open loop request n is due `origin + n / rate`. vegeta's sleeps put each send a
    fraction of a millisecond either side of its tick, so the origin is the median of
    `sent - n / rate` over the run, and a request counts the longer of its own latency and its
    answer's delay after it was due: the usual jitter costs nothing, while a sender held up
    (a stall, and the burst that catches up after it) adds the wait to every late request."""
    interval = 1e9 / rate if rate else 0.0
    if rate:
        first = percentile([sent - seq * interval for sent, _, _, _, seq, _ in rows], 0.5)
    else:
        first = min(sent for sent, *_ in rows)
    begin, end = first + warmup * 1e9, first + (warmup + duration) * 1e9
    latencies: dict[str, list[float]] = {}
    statuses: dict[str, int] = {}
    errors: dict[str, int] = {}
    sent = 0
    for sent_ns, status, latency_ns, error, seq, target in rows:
        due = first + seq * interval if rate else sent_ns
        if due < begin or due >= end:
            continue
        sent += 1
        path = urlsplit(target).path
        if status:
            statuses[f"{path} {status}"] = statuses.get(f"{path} {status}", 0) + 1
        if status == 0 or status >= 400:
            kind = f"http_{status}" if status else ("timeout" if "Timeout" in error else error)
            errors[kind] = errors.get(kind, 0) + 1
        elif rate or sent_ns + latency_ns <= end:
            waited = max(latency_ns, sent_ns + latency_ns - due)
            latencies.setdefault(path, []).append(waited / 1e9)
    everything = [x for values in latencies.values() for x in values]
    return {
        "duration_s": duration,
        "sent": sent,
        "completed_ok": len(everything),
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "statuses": statuses,
        "throughput_rps": round(len(everything) / duration, 1),
        "latency": _latency(everything),
        "by_path": {path: _latency(values) for path, values in latencies.items()},
    }


def _latency(seconds: list[float]) -> dict[str, float]:
    """`n` and the p50 / p90 / p99 in ms (zeros when nothing was answered)."""
    if not seconds:
        return {"n": 0, "p50_ms": 0.0, "p90_ms": 0.0, "p99_ms": 0.0}
    return summary(seconds, (0.5, 0.9, 0.99), scale=1e3, unit="_ms")
