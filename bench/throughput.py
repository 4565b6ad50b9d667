"""`/v1/rank` throughput against a bare aiohttp handler, both driven by `wrk` in one run.

`python -m bench.throughput [--duration S] [--rounds N]` (needs `wrk` on the PATH: a compiled
load generator, so the generator does not eat the cores the servers compete for).

The baseline is an aiohttp app whose one handler reads the body and returns a constant JSON,
served by as many processes on one port (`SO_REUSEPORT`) as the `toolselect serve --workers N`
it is compared with. toolselect serves the 1,000-tool synthetic catalog of `bench.perf` from
the embedded store, with `hashing` and with the default `hybrid`. Arms are interleaved over
`--rounds` rounds and the medians compared, so a busy machine shifts all of them alike.
Writes `bench/results/throughput.json`; `python -m bench report` puts it in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import RESULTS
from bench.perf.catalog import catalog_file, synth_catalog, synth_queries
from bench.perf.machine import machine_facts
from bench.perf.server import ServerProcess, free_port, import_catalog, server_env
from bench.stats import percentile

CONNECTIONS = 16
WORKERS = 2


def bare_app_main(port: int, workers: int) -> None:
    """The baseline: `workers` processes on `port`, one handler that reads the body."""
    from aiohttp import web

    async def rank(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"results": [], "margin": 0.0})

    async def ready(_: web.Request) -> web.Response:
        return web.json_response({"ready": True})

    for _ in range(workers - 1):
        if os.fork() == 0:  # a child serves; the parent forks the next, then serves too
            break
    app = web.Application()
    app.router.add_post("/v1/rank", rank)
    app.router.add_get("/readyz", ready)
    web.run_app(app, host="127.0.0.1", port=port, reuse_port=True, print=None)


class BareServer:
    def __init__(self, workers: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workers = workers
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> BareServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.throughput", "--bare", str(self.port), str(self.workers)],
            start_new_session=True,
        )
        _wait_ready(self.url)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, 15)
        self.proc.wait(30)


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} not ready within 300 s")


def _lua(queries: list[str], k: int) -> str:
    """A wrk script that POSTs /v1/rank with the queries in turn."""
    bodies = [json.dumps({"query": q, "k": k}) for q in queries]
    items = ",\n".join(json.dumps(b) for b in bodies)  # JSON strings are valid Lua strings
    return (
        f"local bodies = {{\n{items}\n}}\n"
        "local i = 0\n"
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        "request = function()\n"
        "  i = i % #bodies + 1\n"
        '  return wrk.format(nil, "/v1/rank", nil, bodies[i])\n'
        "end\n"
    )


def run_wrk(url: str, script: Path, duration: int) -> dict[str, float]:
    """`wrk` for `duration` seconds (one thread, `CONNECTIONS` connections): req/s and errors."""
    out = subprocess.run(
        ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{duration}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
        timeout=duration + 60,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {
        "rps": rps,
        "p50_ms": float(p50.group(1)) * scale[p50.group(2)] if p50 else float("nan"),
        "non_2xx": float(errors.group(1)) if errors else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per arm")
    parser.add_argument("--bare", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare:
        bare_app_main(*args.bare)
        return 0
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    catalog = synth_catalog(1_000)
    queries = synth_queries(catalog, 200)
    arms: dict[str, list[dict[str, float]]] = {}
    facts = machine_facts()
    with tempfile.TemporaryDirectory(prefix="toolselect-wrk-") as tmp:
        root = Path(tmp)
        script = root / "rank.lua"
        script.write_text(_lua(queries, 5), encoding="utf-8")
        servers: list[tuple[str, Any]] = [("bare aiohttp", lambda: BareServer(WORKERS))]
        for embedder in ("hashing", "hybrid"):
            workdir = root / embedder
            workdir.mkdir()
            env = server_env(f"sqlite:{workdir / 'toolselect.db'}", workdir)
            env["TOOLSELECT_EMBEDDER"] = embedder
            print(f"importing 1,000 tools ({embedder})", flush=True)
            import_catalog(env, catalog_file(1_000), workdir)
            for workers in (1, WORKERS):
                servers.append(
                    (
                        f"{embedder}, --workers {workers}",
                        lambda env=env, workdir=workdir, workers=workers: ServerProcess(
                            env, workdir, ["--workers", str(workers)]
                        ),
                    )
                )
        for round_ in range(args.rounds):
            for name, start in servers:
                with start() as server:
                    run_wrk(server.url, script, 2)  # warm-up: caches, JIT-free but lazy imports
                    result = run_wrk(server.url, script, args.duration)
                arms.setdefault(name, []).append(result)
                print(f"  round {round_ + 1} {name}: {result['rps']:.0f} req/s", flush=True)
    summary: dict[str, dict[str, Any]] = {
        name: {
            "rps": percentile((r["rps"] for r in runs), 0.5),
            "p50_ms": percentile((r["p50_ms"] for r in runs), 0.5),
            "non_2xx": sum(r["non_2xx"] for r in runs),
            "runs": runs,
        }
        for name, runs in arms.items()
    }
    bare = summary["bare aiohttp"]["rps"]
    for row in summary.values():
        row["ratio"] = row["rps"] / bare
    report: dict[str, Any] = {
        "command": "python -m bench.throughput "
        + " ".join(f"--{k} {v}" for k, v in vars(args).items() if k != "bare"),
        "tools": 1_000,
        "connections": CONNECTIONS,
        "baseline_workers": WORKERS,
        "wrk": subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")[0],
        "machine": facts,
        "loadavg_end": list(os.getloadavg()),
        "arms": summary,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "throughput.json").write_text(json.dumps(report, indent=1) + "\n")
    for name, row in summary.items():
        print(f"{name}: {row['rps']:.0f} req/s ({100 * row['ratio']:.1f}% of bare)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
