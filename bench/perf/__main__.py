"""Latency, throughput and load benchmarks: `python -m bench.perf [--quick] [--only SECTIONS]`.

Sections (all side by side in one run, medians reported; the machine is noisy):
  inproc  `CentroidRanker.rank` at 100 / 1,000 / 10,000 tools, alone and with the query
          embedding, per embedder, with numpy's default BLAS threads and with one thread
  http    `/v1/rank` at 1,000 tools, closed-loop clients 1 / 8 / 64 (`bench.vegeta`)
  cold    `toolselect select --url` spawned per call, the in-process `select`, -X importtime
  intake  `service.learning.observe` call time and end-to-end intake throughput into each store
  load    open-loop 90% rank / 10% observe at a fixed rate against the server on each store

Writes bench/results/perf.json and the tables in perf.md (`--quick`: bench/out/quick/, so a
smoke run never replaces the published figures); the prose reading them is FINDINGS.md, by
hand. Caches synthetic catalogs and MiniLM vectors in bench/out/. Neo4j runs only when
NEO4J_URI is set, and WIPES that database (benchmark only).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import OUT, RESULTS, vegeta
from bench.perf import report
from bench.perf.catalog import catalog_file, synth_queries
from bench.perf.cold import bench_cold
from bench.perf.http_rank import bench_http
from bench.perf.inproc import bench_inproc
from bench.perf.intake import bench_intake
from bench.perf.load import bench_load
from bench.perf.machine import machine_facts, settle
from bench.perf.server import ServerProcess, import_catalog, server_env
from bench.perf.stores import store_settings
from bench.perf.targets import TARGETS

SECTIONS = ("inproc", "http", "cold", "intake", "load")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.perf", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--only", help=f"comma list of sections ({','.join(SECTIONS)})")
    parser.add_argument("--no-minilm", action="store_true", help="skip the minilm embedder")
    parser.add_argument(
        "--rate", type=float, help="load test rate, req/s (default: half the /v1/rank peak, <= 500)"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=None,
        help="seconds to wait for a quiet machine before each section (default 180; quick 0)",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="only rewrite perf.md from perf.json (no runs; with --quick, the smoke run's)",
    )
    args = parser.parse_args(argv)
    # A smoke run must not overwrite the published figures.
    results_dir = OUT / "quick" if args.quick else RESULTS
    if args.render:
        print(f"wrote {report.rerender(results_dir)}")
        return 0
    only = set(args.only.split(",")) if args.only else set(SECTIONS)
    if only & {"http", "load"} and vegeta.install() is None:
        print(vegeta.MISSING, file=sys.stderr)
        return 2
    from toolselect.logs import configure_logging

    configure_logging("warning", "console")
    stores = ["sqlite", *(["neo4j"] if os.environ.get("NEO4J_URI") else [])]
    path = results_dir / "perf.json"
    # A partial run (--only) updates its sections and keeps the others.
    results: dict[str, Any] = json.loads(path.read_text()) if args.only and path.exists() else {}
    machine = machine_facts()
    prefix = [f"NEO4J_URI={os.environ['NEO4J_URI']}"] if "neo4j" in stores else []
    prefix += [f"nice -n {machine['nice']}"] if machine["nice"] else []
    command = " ".join([*prefix, "python -m bench.perf", *(sys.argv[1:] if argv is None else argv)])
    results.update(machine=machine, quick=args.quick, command=command, targets_spec=TARGETS)
    run = {"command": command, "sections": sorted(only, key=SECTIONS.index)}
    results["runs"] = [*results.get("runs", []), run]
    catalog_path = catalog_file(1_000)
    catalog = json.loads(catalog_path.read_text())["tools"]
    queries = synth_queries(catalog, 500)
    wait = args.settle if args.settle is not None else (0.0 if args.quick else 180.0)
    busy = results.setdefault("busy_cores_before", {})

    def quiet(section: str) -> None:
        busy[section] = settle(wait)
        print(f"{section}: machine busy {busy[section]} cores before the section", flush=True)

    if "inproc" in only:
        quiet("inproc")
        print("in-process rank", flush=True)
        embedders = ["hashing"] + ([] if args.no_minilm else ["minilm"])
        results["inproc"] = bench_inproc(args.quick, embedders)
    if only & {"http", "cold"}:
        quiet("http")
        with tempfile.TemporaryDirectory(prefix="toolselect-http-") as tmp:
            env = server_env(
                store_settings("sqlite", Path(tmp), db_name="bench.db").store, Path(tmp)
            )
            import_catalog(env, catalog_path, Path(tmp))
            with ServerProcess(env, Path(tmp)) as server:
                if "http" in only:
                    print("HTTP /v1/rank", flush=True)
                    results["http"] = bench_http(server, queries, args.quick)
                if "cold" in only:
                    print("cold start", flush=True)
                    results["cold"] = bench_cold(server, catalog, args.quick)
    if "intake" in only:
        quiet("intake")
        print("learning intake", flush=True)
        results["intake"] = bench_intake(stores, args.quick, catalog)
    if "load" in only:
        quiet("load")
        rate = args.rate
        if rate is None:
            # Below saturation on this machine as it is now: half the closed-loop peak.
            levels = results.get("http", {}).get("levels", [])
            peak = max((lv["throughput_rps"] for lv in levels), default=1000.0)
            rate = float(min(500, max(50, round(peak / 2, -1))))
        results["load_rate"] = {"rate": rate, "chosen": "--rate" if args.rate else "half the "
                                "closed-loop /v1/rank peak of this run, at most 500"}  # fmt: skip
        print("fixed-rate load", flush=True)
        results["load"] = [
            bench_load(store, catalog_path, queries, rate, args.quick) for store in stores
        ]
    results["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["finished_at"] = run["finished_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    report.write(results, results_dir)
    print(f"wrote {path} and {results_dir / 'perf.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
