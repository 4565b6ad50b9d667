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
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import RESULTS, write_json, wrk
from bench.perf.catalog import catalog_file, synth_catalog, synth_queries
from bench.perf.machine import machine_facts
from bench.perf.server import ServerProcess, free_port, import_catalog, server_env, wait_ready
from bench.stats import percentile

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
        wait_ready(self.url, self.proc)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, 15)
        self.proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per arm")
    parser.add_argument("--bare", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare:
        bare_app_main(*args.bare)
        return 0
    if not wrk.installed():
        print(wrk.MISSING, file=sys.stderr)
        return 2
    catalog = synth_catalog(1_000)
    queries = synth_queries(catalog, 200)
    arms: dict[str, list[dict[str, float]]] = {}
    facts = machine_facts()
    with tempfile.TemporaryDirectory(prefix="toolselect-wrk-") as tmp:
        root = Path(tmp)
        script = root / "rank.lua"
        script.write_text(wrk.rank_script(queries), encoding="utf-8")
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
                    wrk.run(server.url, script, 2)  # warm-up: caches, JIT-free but lazy imports
                    result = wrk.run(server.url, script, args.duration)
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
        "connections": wrk.CONNECTIONS,
        "baseline_workers": WORKERS,
        "wrk": wrk.version(),
        "machine": facts,
        "loadavg_end": list(os.getloadavg()),
        "arms": summary,
    }
    write_json(RESULTS / "throughput.json", report)
    for name, row in summary.items():
        print(f"{name}: {row['rps']:.0f} req/s ({100 * row['ratio']:.1f}% of bare)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
