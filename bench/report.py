"""BENCHMARKS.md, regenerated from scratch from bench/results/*.json (and perf.md when present,
followed by the hand-written bench/perf/FINDINGS.md).

The prose and the tables are bench/templates/report.md: here the results are loaded, the few
values that need logic derived (the defaults the evidence supports, the targets) and the blocks
rendered in the page's order.

Nothing here measures: every number comes from the JSON the other stages wrote, so
`python -m bench report` rewrites the page without running anything.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

from bench import RESULTS, ROOT, read_result
from bench import learning_report as learning
from bench.markdown import pct, prose
from bench.perf import report as perf

# -- formatting ---------------------------------------------------------------------------------


# -- the decisions ------------------------------------------------------------------------------


def decide(acc: dict[str, Any], learn: dict[str, Any] | None) -> dict[str, Any]:
    """The defaults the evidence supports, with the numbers behind them."""
    ours = [m for m in acc["methods"] if m.get("family") == "toolselect"]
    bm25 = max(
        (m for m in acc["methods"] if m["method"].startswith("BM25")), key=lambda m: m["top1"]
    )
    # On a top-1 tie the hybrid at the weight the benchmark settled on is the one named.
    chosen = f"hybrid w={acc['best_hybrid_weight_before']:g}"
    best = max(ours, key=lambda m: (m["top1"], m["method"] == chosen, m["mrr10"]))
    out: dict[str, Any] = {
        "bm25": bm25,
        "best": best,
        "hybrid_weight": acc["best_hybrid_weight_before"],
        "embedder": "hybrid" if best["method"].startswith("hybrid") else best["method"],
        "label": best["method"],
    }
    return out


# -- the page -----------------------------------------------------------------------------------


def _text(block: str, /, **values: object) -> str:
    return prose("report", block, **values)


def render() -> str:
    acc = read_result("accuracy.json")
    learn = read_result("learning.json")
    perf_md = RESULTS / "perf.md"
    parts = [_text("page")]
    if acc is None:
        return "\n\n".join([*parts, _text("no_accuracy")]) + "\n"
    d = decide(acc, learn)
    best, bm25 = d["best"], d["bm25"]
    hashing, minilm = _method(acc, "hashing"), _method(acc, "minilm")
    parts.append(
        _text(
            "summary",
            acc=acc,
            best=best,
            bm25=bm25,
            hashing=hashing,
            targets=_summary_targets(learn, d, hashing),
        )
    )
    if learn is not None:
        torch = read_result("accuracy_torch.json")
        parts.append(
            _text(
                "findings",
                best=best,
                bm25=bm25,
                hashing=hashing,
                minilm=minilm,
                torch=_method(torch, "minilm") if torch else None,
                learning_findings=learning.findings(learn),
            )
        )
    parts += [
        _text("machine", m=acc["machine"], learn=learn),
        _text("dataset", **acc["dataset"]),
        _text("accuracy", acc=acc, sr=acc.get("semantic_router", {})),
        _text("grid", acc=acc),
        _text("variants", variants=_by_method(acc["text_variants"])),
    ]
    if learn is not None:
        parts.append(learning.section(learn))
    agent = read_result("agent.json")
    if agent is not None:
        parts.append(_agent(agent))
    talks = read_result("conversations.json")
    if talks is not None:
        from bench.conversations import section

        parts.append(section(talks))
    if perf_md.is_file():
        # The generated tables, then the prose that reads them (hand-written, kept out of the
        # generator so re-rendering never touches it).
        parts += [perf_md.read_text().strip(), perf.findings()]
    else:
        parts.append(_text("no_perf"))
    wrk = read_result("throughput.json")
    if wrk is not None:
        parts.append(_text("throughput", wrk=wrk, targets=THROUGHPUT_TARGETS))
    tenants = read_result("tenants.json")
    if tenants is not None:
        parts.append(
            _text(
                "tenants",
                result=tenants,
                mem=tenants["memory"],
                wrk=tenants["throughput"],
                neo=tenants.get("neo4j"),
                cpu=_cpu(tenants),
            )
        )
    speed = read_result("embed_speed.json")
    if speed is not None:
        parts.append(_embed_speed(speed))
    parts += [_defaults(acc, learn, d), _text("commands")]
    return "\n\n".join(parts).rstrip() + "\n"


def _agent(agent: dict[str, Any]) -> str:
    """`python -m bench agent`: each variant against the usage and gold lines, then the
    held-out top-1 and the online recall@5 step by step."""
    steps = agent["steps"]
    return _text(
        "agent",
        agent=agent,
        runs=[(method, r) for method, runs in agent["methods"].items() for r in runs],
        spans=[f"after {b} (turns {a + 1}-{b})" for a, b in pairwise(steps)],
    )


# Issue targets for `/v1/rank` throughput, as a share of the bare handler's.
THROUGHPUT_TARGETS = {"hashing, --workers 2": 0.50, "hybrid, --workers 2": 0.35}

# Issue targets for the dense embedder and the exec selector, in milliseconds (p50).
DENSE_QUERY_MS = 5.0
WARM_SPAWN_MS = 300.0


def _embed_speed(speed: dict[str, Any]) -> str:
    """`bench.embed_speed`: per-query embedding and `toolselect select` spawn times, as rows of
    (what, cell, unit, target) for the cells the run measured."""
    rows: list[tuple[str, dict[str, float], str, float | None]] = []
    if "lexical" in speed:
        lex = speed["lexical"]
        rows.append(
            (
                "hashing, scikit-learn's `HashingVectorizer.transform`",
                lex["sklearn_transform"],
                "µs",
                None,
            )
        )
        rows.append(("hashing, the single-query path", lex["current_inline"], "µs", None))
    if "dense" in speed:
        dense = speed["dense"]
        tokens = dense.get("median_tokens", {})
        for key, what in (
            ("minilm_1_thread_ms", "agent-like requests of 4-12 words"),
            ("minilm_1_thread_bfcl_ms", "BFCL's held-out queries"),
        ):
            if key in dense:
                size = f", median {tokens[key]:g} tokens" if key in tokens else ""
                what = f"MiniLM (int8 ONNX), one query, one thread: {what}{size}"
                rows.append((what, dense[key], "ms", DENSE_QUERY_MS))
    spawn = speed.get("spawn")
    if spawn is not None:
        if "python_startup" in spawn:
            rows.append(
                ("`python -c pass` (the floor of a spawn)", spawn["python_startup"], "ms", None)
            )
        rows += [
            ("`select` spawn, cold (no vector cache, no kept graph)", spawn["cold_no_cache"], "ms", None),
            ("`select` spawn, warm, new query (model from the kept graph)", spawn["warm_new_query"], "ms", WARM_SPAWN_MS),
            ("`select` spawn, warm, new query, packaged graph", spawn["warm_new_query_packaged_graph"], "ms", None),
            ("`select` spawn, warm, repeated query (no model load)", spawn["warm_repeated_query"], "ms", None),
        ]  # fmt: skip
    return _text("embed_speed", speed=speed, rows=rows, spawn=spawn, cpu=_cpu(speed))


def _cpu(speed: dict[str, Any]) -> str:
    """`; CPU, cores (BLAS kernels)` from a result's machine facts, when it has them: the same
    code ran 1.5-3x apart on the VMs these benchmarks have seen."""
    facts = speed.get("machine")
    if not facts:
        return ""
    kernels = sorted({b["architecture"] for b in facts.get("blas", []) if b.get("architecture")})
    suffix = f" ({', '.join(kernels)} kernels)" if kernels else ""
    return f"; {facts['cpu']}, {facts['cores']} cores{suffix}"


def _target(name: str, measured: float, limit: float) -> list[str]:
    ok = measured >= limit - 1e-9
    miss = "" if ok else f"by {100 * (limit - measured):.1f} points"
    return [name, pct(measured), pct(limit), "yes" if ok else "**no**", miss]


def _summary_targets(
    learn: dict[str, Any] | None, d: dict[str, Any], hashing: dict[str, Any]
) -> list[list[str]]:
    """The summary's rows: ranking against BM25 and recall@5, then the learning curve's."""
    rows = []
    for m in (d["best"], hashing):
        rows.append(
            _target(f"{m['method']}: top-1 >= best BM25 + 5", m["top1"], d["bm25"]["top1"] + 0.05)
        )
        rows.append(_target(f"{m['method']}: recall@5 >= 80", m["recall5"], 0.80))
    if learn is not None:
        for method in learning.methods(learn):
            rows += learning.targets(learn, method)
    return rows


def _method(acc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in acc["methods"] if m["method"] == name)


def _by_method(variants: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Tool-text variant results as method -> variant -> result."""
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in variants:
        by.setdefault(r["method"], {})[r["variant"]] = r
    return by


def _defaults(acc: dict[str, Any], learn: dict[str, Any] | None, d: dict[str, Any]) -> str:
    grid = sorted(acc["hybrid_grid"], key=lambda g: g["weight"])
    at = next(i for i, g in enumerate(grid) if g["weight"] == d["hybrid_weight"])
    # How far the chosen weight's neighbours fall below it, in points.
    spread = max(
        100 * (grid[at]["before"]["top1"] - g["before"]["top1"])
        for g in grid[max(at - 1, 0) : at + 2]
    )
    by = _by_method(acc["text_variants"])
    return _text(
        "defaults",
        d=d,
        best=d["best"],
        bm25=d["bm25"],
        hashing=_method(acc, "hashing"),
        at=grid[at],
        spread=float(spread),
        after=max(acc["hybrid_grid"], key=lambda g: g["after_truth"]["top1"]),
        learning=learning.defaults(learn) if learn else [],
        full_wins=all(v["full"]["top1"] >= max(r["top1"] for r in v.values()) for v in by.values()),
    )


def write() -> Path:
    path = ROOT / "BENCHMARKS.md"
    path.write_text(render())
    return path
