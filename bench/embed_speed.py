"""Per-query embedding cost and exec-selector spawn time: `python -m bench.embed_speed`.

Run on demand (not part of `make bench`); every figure is a median over many calls, with the
arms compared interleaved in the same run because this machine is shared and noisy.

  lexical  one query at a time through the hashing embedder: scikit-learn's
           `HashingVectorizer.transform` (`reference_vectors`) and the inline path (`mmh3`,
           per-word memo, sparse sums); the path before `mmh3` is timed against it by
           `python -m bench.experiments.previous_hashing`
  dense    the `minilm` ONNX embedder, one query per call, one intra-op thread (p50, p90), on
           agent-like requests and on BFCL's held-out queries (when the bench data is there)
  spawn    `toolselect select` (in-process, default `hybrid` embedder) with 20 candidates
           (17 from the demo catalog in the store, 3 unknown): cold (no vector cache, no kept
           model graph), warm (cached candidates, a new query each spawn: the model loads
           from the graph an earlier spawn kept), the same with the kept graph unavailable
           (the model loads from the packaged file) and warm with a repeated query (no model
           load at all)

Options: --quick (fewer repetitions), --only lexical,dense,spawn, --python PATH (the
interpreter the spawns run: e.g. a virtualenv with a plain `pip install toolselect`, which
lacks the dev tools' extra imports). Prints one JSON object and writes it to
`bench/results/embed_speed.json` (`bench/out/` for a run with --only or --quick, so a partial
run never replaces the published figures); `python -m bench report` puts it in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from bench import OUT, RESULTS, write_json
from bench.data import load as load_bfcl
from bench.perf.machine import machine_facts
from bench.stats import percentile, summary
from toolselect.catalog import load_demo_catalog
from toolselect.embed import HashingEmbedder, MiniLMEmbedder
from toolselect.embed.minilm import MINILM

SECTIONS = ("lexical", "dense", "spawn")
SEED = 20261123
_VOCABULARY = (
    "send email report weather forecast tomorrow city price stock bitcoin convert currency "
    "translate text calendar meeting schedule reminder file read write search web page "
    "github issue pull request slack channel message post contact phone call map route "
    "music play pause timer alarm note list todo order pizza flight hotel booking"
)
WORDS = tuple(_VOCABULARY.split())


def queries(n: int, rng: random.Random) -> list[str]:
    """Agent-like requests: 4..12 words from a tool vocabulary, a name or number now and then."""
    out = []
    for i in range(n):
        words = rng.choices(WORDS, k=rng.randint(4, 12))
        if i % 3 == 0:
            words.append(rng.choice(["Marco", "Turin", "getWeatherForecast", "Q3", str(i)]))
        out.append(" ".join(words))
    return out


def lexical(reps: int) -> dict[str, Any]:
    """Per-query microseconds of the two hashing paths, interleaved query by query."""
    texts = queries(reps, random.Random(SEED))
    current = HashingEmbedder()
    arms: dict[str, Callable[[str], object]] = {
        "sklearn_transform": lambda q: current.reference_vectors([q]),
        "current_inline": lambda q: current.embed_now([q]),
    }
    out = per_query_us(arms, texts)
    out["bit_identical_to_sklearn"] = all(
        np.array_equal(current.embed_now([t]), current.reference_vectors([t])) for t in texts[:200]
    )
    return out


def per_query_us(arms: dict[str, Callable[[str], object]], texts: Sequence[str]) -> dict[str, Any]:
    """Each arm's microseconds per query, interleaved query by query after the same warm-up
    (the first 50 queries, so every memo starts equally warm)."""
    for text in texts[:50]:
        for arm in arms.values():
            arm(text)
    times: dict[str, list[float]] = {name: [] for name in arms}
    for text in texts:
        for name, arm in arms.items():
            started = time.perf_counter()
            arm(text)
            times[name].append(time.perf_counter() - started)
    out: dict[str, Any] = {name: summary(ts, scale=1e6) for name, ts in times.items()}
    out["unit"] = "us"
    return out


def bfcl_queries(n: int) -> list[str] | None:
    """The first `n` held-out queries of the accuracy stage's BFCL data (None when bfcl-eval
    is not installed): user requests about twice as long as `queries`."""
    try:
        return [q.text for q in load_bfcl().held[:n]]
    except SystemExit:  # how bench.data says its data is missing, with the install hint
        return None


def dense(reps: int) -> dict[str, Any]:
    """The ONNX MiniLM embedder, one query per call, one intra-op thread: agent-like requests
    and, interleaved with them, BFCL's held-out queries."""
    embedder = MiniLMEmbedder(threads=1)
    started = time.perf_counter()
    embedder.encode(["warm up"])
    load = time.perf_counter() - started
    arms = {"minilm_1_thread_ms": queries(reps, random.Random(SEED + 1))}
    bfcl = bfcl_queries(reps)
    if bfcl:
        arms["minilm_1_thread_bfcl_ms"] = bfcl
    times: dict[str, list[float]] = {name: [] for name in arms}
    for i in range(reps):
        for name, texts in arms.items():
            if i < len(texts):
                started = time.perf_counter()
                embedder.encode([texts[i]])
                times[name].append(time.perf_counter() - started)
    tokenizer = Tokenizer.from_file(str(MINILM.tokenizer_file()))
    tokenizer.no_padding()  # the file pads to 128; the embedder pads a batch to its longest
    out: dict[str, Any] = {name: summary(ts, scale=1e3) for name, ts in times.items()}
    out["median_tokens"] = {
        name: percentile((len(tokenizer.encode(t).ids) for t in texts), 0.5)
        for name, texts in arms.items()
    }
    out["load_and_first_ms"] = round(load * 1e3, 1)
    return out


def _request(query: str) -> str:
    tools = load_demo_catalog()[:17]
    candidates: list[dict[str, Any]] = [
        {"ID": t.name, "Name": t.name, "Description": t.description, "Metadata": {}} for t in tools
    ]
    extra = ["Post a message to a Slack channel", "Open a GitHub pull request", "Translate text"]
    candidates += [
        {"ID": f"ext_tool_{i}", "Name": f"ext_tool_{i}", "Description": d, "Metadata": None}
        for i, d in enumerate(extra)
    ]
    return json.dumps({"query": {"Text": query, "Kind": "tool", "K": 5}, "candidates": candidates})


def _has(python: str, module: str) -> bool:
    """Whether `python` can import `module` (without importing it)."""
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", code], check=False).returncode == 0


def spawn(reps: int, python: str = sys.executable) -> dict[str, Any]:
    """Wall time of `toolselect select` processes, the arms interleaved spawn by spawn."""
    folder = Path(tempfile.mkdtemp(prefix="toolselect-embed-speed-"))
    # Without PYTHONPATH: the spawns must import the toolselect installed for `python`, not a
    # checkout the caller's path points at (which made two installs measure the same code).
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TOOLSELECT_", "NEO4J_")) and k != "PYTHONPATH"
    }
    env = {
        **keep,
        "TOOLSELECT_DATA_DIR": str(folder),
        "TOOLSELECT_EMBEDDER": "hybrid",
        "TOOLSELECT_LOAD_DEMO": "true",
        "TOOLSELECT_LOG_FORMAT": "json",
    }
    command = [python, "-m", "toolselect.cmd.main", "select"]
    cache, models = folder / "vectors.db", folder / "models"

    def once(query: str) -> float:
        started = time.perf_counter()
        done = subprocess.run(
            command, input=_request(query), env=env, capture_output=True, text=True, check=False
        )
        took = time.perf_counter() - started
        if done.returncode != 0 or not json.loads(done.stdout)["selected"]:
            raise RuntimeError(f"select failed: {done.stderr.strip()}")
        return took

    try:
        once("load the demo catalog into the store")  # the store exists in every arm
        texts = queries(3 * reps, random.Random(SEED + 2))
        cold, warm, packaged, repeated, bare = [], [], [], [], []
        for i in range(reps):
            # The interpreter's own start: the floor of any spawn, and a gauge of the machine
            # when figures from different runs are compared.
            started = time.perf_counter()
            subprocess.run([python, "-c", "pass"], env=env, check=True)
            bare.append(time.perf_counter() - started)
            cache.unlink(missing_ok=True)
            for suffix in ("-wal", "-shm"):
                Path(f"{cache}{suffix}").unlink(missing_ok=True)
            shutil.rmtree(models, ignore_errors=True)
            cold.append(once(texts[3 * i]))
            warm.append(once(texts[3 * i + 1]))
            repeated.append(once(texts[3 * i + 1]))
            # A file where the models folder goes: nothing kept can be read or written.
            models.rename(folder / "models.kept")
            models.write_text("")
            packaged.append(once(texts[3 * i + 2]))
            models.unlink()
            (folder / "models.kept").rename(models)
        return {
            "unit": "ms",
            # Described, not named: the path is this machine's.
            "interpreter": "the bench's own" if python == sys.executable else "given by --python",
            "dev_extras_installed": _has(python, "pytest"),
            "python_startup": summary(bare, scale=1e3),
            "cold_no_cache": summary(cold, scale=1e3),
            "warm_new_query": summary(warm, scale=1e3),
            "warm_new_query_packaged_graph": summary(packaged, scale=1e3),
            "warm_repeated_query": summary(repeated, scale=1e3),
            "candidates": 20,
            "embedder": "hybrid",
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.embed_speed", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(SECTIONS))
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        parser.error(f"expected sections among {', '.join(SECTIONS)}, got {', '.join(unknown)}")
    result: dict[str, Any] = {
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "machine": machine_facts(),
    }
    if "lexical" in only:
        result["lexical"] = lexical(500 if args.quick else 3000)
    if "dense" in only:
        result["dense"] = dense(50 if args.quick else 300)
    if "spawn" in only:
        result["spawn"] = spawn(5 if args.quick else 20, args.python)
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    shown = ["PYTHON" if a == args.python else a for a in (argv or sys.argv[1:])]
    result["command"] = " ".join(["python -m bench.embed_speed", *shown])
    print(json.dumps(result, indent=1))
    # Only a run of every section replaces the published figures: a partial one (--only) or a
    # short one (--quick) would drop or thin what BENCHMARKS.md shows.
    write_json(
        (RESULTS if set(only) == set(SECTIONS) and not args.quick else OUT) / "embed_speed.json",
        result,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
