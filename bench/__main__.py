"""`python -m bench [accuracy|learning|agent|conversations|perf|report|all]` (see
bench/README.md).

`all` runs accuracy, learning, agent, conversations and perf (`bench.perf` in a subprocess) side by side in one
run, then regenerates BENCHMARKS.md from scratch.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import RESULTS, ROOT, read_result, write_json

STAGES = ("accuracy", "learning", "agent", "conversations", "perf", "report", "all")


def _stage(name: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one stage, record its machine and write bench/results/NAME.json."""
    from bench.perf.machine import recorded

    result = recorded(run)
    write_json(RESULTS / f"{name}.json", result)
    print(f"{name}: done in {result['took_s']:.0f} s", flush=True)
    return result


def _hybrid_weight() -> float:
    """The hybrid weight the accuracy stage chose (0.5 before it has run)."""
    acc = read_result("accuracy.json")
    return float(acc["best_hybrid_weight_before"]) if acc else 0.5


def accuracy() -> None:
    from bench import accuracy as stage
    from bench.cache import Encoders
    from bench.data import load

    print("accuracy: loading data and embedders", flush=True)
    url = os.environ.get("TOOLSELECT_EMBED_URL", "")
    _stage("accuracy", lambda: stage.run(load(), Encoders(), url=url))


def learning() -> None:
    from bench import learning as stage
    from bench.cache import Encoders
    from bench.data import load

    weight = _hybrid_weight()
    print(f"learning: hashing, hybrid w={weight:g}", flush=True)
    specs = [("hashing", 0.5), ("hybrid", weight)]
    result = _stage(
        "learning", lambda: stage.run(load(), Encoders(), specs, [f"hybrid w={weight:g}"])
    )
    baselines = {}
    acc = read_result("accuracy.json")
    if acc:
        bm25 = max(
            (m for m in acc["methods"] if m["method"].startswith("BM25")), key=lambda m: m["top1"]
        )
        baselines[f"best BM25 ({100 * bm25['top1']:.1f}%)"] = bm25["top1"]
    stage.plot(result, RESULTS / "learning_curve.png", baselines)


def agent() -> None:
    from bench import agent as stage
    from bench.cache import Encoders
    from bench.data import load

    weight = _hybrid_weight()
    print(f"agent: hybrid w={weight:g}, hashing", flush=True)
    _stage("agent", lambda: stage.run(load(), Encoders(), [("hybrid", weight), ("hashing", 0.5)]))


def conversations() -> None:
    from bench import conversations as stage
    from bench.cache import Encoders
    from bench.multiturn_data import load

    print("conversations: hybrid, hashing", flush=True)
    _stage("conversations", lambda: stage.run(load(), Encoders()))


def perf() -> None:
    print("perf: python -m bench.perf", flush=True)
    subprocess.run([sys.executable, "-m", "bench.perf"], cwd=ROOT, check=True)


def report() -> None:
    from bench.report import write

    print(f"report: wrote {write().relative_to(ROOT)}", flush=True)


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
