"""Benchmarks of toolselect on this machine; `python -m bench [accuracy|learning|perf|report|all]`.

Modules:
  data      the public tool-retrieval data (bfcl-eval: `live_multiple`, `simple_python`), the
            seeded learn / held-out split, tool-text variants
  cache     embedding cache (bench/out/cache/) so each text is embedded once across arms
  accuracy  top-1, recall@5, MRR@10 and per-query latency per embedder, BM25 and
            semantic-router baselines, knob sweeps -> bench/results/accuracy.json
  learning  the learning curve through the real learner (teacher stub on / off), margin-floor
            sweep -> bench/results/learning.json, learning_curve.png
  perf      latency and throughput (`python -m bench.perf`, a package: one module per section)
            -> bench/results/perf.json, perf.md; its hand-written reading is perf/FINDINGS.md
  report    BENCHMARKS.md from the JSON results (regenerated from scratch)
  experiments  one-off experiments, on demand, feeding no table (`python -m bench.experiments.NAME`)

Committed results live in bench/results/; bench/out/ is scratch (git-ignored).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
RESULTS = ROOT / "bench" / "results"


def read_result(name: str) -> dict[str, Any] | None:
    """bench/results/NAME as loaded; None before its stage has run."""
    path = RESULTS / name
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_json(path: Path, data: object) -> Path:
    """A result as every stage writes it: indented JSON and a final newline, its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path
