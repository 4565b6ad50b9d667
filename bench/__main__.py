"""`python -m bench [accuracy|learning|agent|conversations|perf|report|all]` (see
bench/README.md).

`all` runs accuracy, learning, agent, conversations and perf (`bench.perf` in a subprocess) side by side in one
run, then regenerates BENCHMARKS.md from scratch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from bench import RESULTS, ROOT

STAGES = ("accuracy", "learning", "agent", "conversations", "perf", "report", "all")


def _write(name: str, result: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / name).write_text(json.dumps(result, indent=1, sort_keys=False) + "\n")


def accuracy() -> None:
    from bench import accuracy as stage
    from bench.cache import Encoders
    from bench.data import load
    from bench.perf.machine import stage_machine

    print("accuracy: loading data and embedders", flush=True)
    info = stage_machine()
    result = stage.run(load(), Encoders(), url=os.environ.get("TOOLSELECT_EMBED_URL", ""))
    result["machine"] = info
    result["loadavg_end"] = list(os.getloadavg())
    _write("accuracy.json", result)
    print(f"accuracy: done in {result['took_s']:.0f} s", flush=True)


def learning() -> None:
    from bench import learning as stage
    from bench.cache import Encoders
    from bench.data import load
    from bench.perf.machine import stage_machine

    acc = _read("accuracy.json")
    weight = acc["best_hybrid_weight_before"] if acc else 0.5
    specs = [("hashing", 0.5), ("hybrid", weight)]
    sweep = [f"hybrid w={weight:g}"]
    print(f"learning: hashing, hybrid w={weight:g}", flush=True)
    info = stage_machine()
    result = stage.run(load(), Encoders(), specs, sweep)
    result["machine"] = info
    result["loadavg_end"] = list(os.getloadavg())
    _write("learning.json", result)
    baselines = {}
    if acc:
        bm25 = max(
            (m for m in acc["methods"] if m["method"].startswith("BM25")), key=lambda m: m["top1"]
        )
        baselines[f"best BM25 ({100 * bm25['top1']:.1f}%)"] = bm25["top1"]
    stage.plot(result, RESULTS / "learning_curve.png", baselines)
    print(f"learning: done in {result['took_s']:.0f} s", flush=True)


def agent() -> None:
    from bench import agent as stage
    from bench.cache import Encoders
    from bench.data import load
    from bench.perf.machine import stage_machine

    acc = _read("accuracy.json")
    weight = acc["best_hybrid_weight_before"] if acc else 0.5
    print(f"agent: hybrid w={weight:g}, hashing", flush=True)
    info = stage_machine()
    result = stage.run(load(), Encoders(), [("hybrid", weight), ("hashing", 0.5)])
    result["machine"] = info
    result["loadavg_end"] = list(os.getloadavg())
    _write("agent.json", result)
    print(f"agent: done in {result['took_s']:.0f} s", flush=True)


def conversations() -> None:
    from bench import conversations as stage
    from bench.cache import Encoders
    from bench.multiturn_data import load
    from bench.perf.machine import stage_machine

    print("conversations: hybrid, hashing", flush=True)
    info = stage_machine()
    result = stage.run(load(), Encoders())
    result["machine"] = info
    result["loadavg_end"] = list(os.getloadavg())
    _write("conversations.json", result)
    print(f"conversations: done in {result['took_s']:.0f} s", flush=True)


def perf() -> None:
    print("perf: python -m bench.perf", flush=True)
    subprocess.run([sys.executable, "-m", "bench.perf"], cwd=ROOT, check=True)


def report() -> None:
    from bench.report import write

    print(f"report: wrote {write().relative_to(ROOT)}", flush=True)


def _read(name: str) -> dict[str, Any] | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("stage", nargs="?", default="all", choices=STAGES)
    parser.add_argument("--skip-perf", action="store_true", help="with `all`: keep perf results")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    # The MiniLM model comes from a package; never let anything reach for a model hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    started = time.perf_counter()
    if args.stage in ("accuracy", "all"):
        accuracy()
    if args.stage in ("learning", "all"):
        learning()
    if args.stage in ("agent", "all"):
        agent()
    if args.stage in ("conversations", "all"):
        conversations()
    if args.stage == "perf" or (args.stage == "all" and not args.skip_perf):
        perf()
    if args.stage in ("report", "all"):
        report()
    print(f"bench {args.stage}: {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
