"""BENCHMARKS.md, regenerated from scratch from bench/results/*.json (and perf.md when present,
followed by the hand-written bench/perf/FINDINGS.md).

The prose is bench/templates/report.md: here are only the values it is filled with and the
tables.

Nothing here measures: every number comes from the JSON the other stages wrote, so
`python -m bench report` rewrites the page without running anything.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

from bench import RESULTS, ROOT
from bench import learning_report as learning
from bench.markdown import ms, pct, prose, table
from bench.perf import report as perf

# -- formatting ---------------------------------------------------------------------------------


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
    acc = load("accuracy.json")
    learn = load("learning.json")
    perf_md = RESULTS / "perf.md"
    parts = [_text("page")]
    if acc is None:
        return "\n\n".join([*parts, _text("no_accuracy")]) + "\n"
    d = decide(acc, learn)
    parts.append(_summary(acc, learn, d))
    if learn is not None:
        parts.append(_findings(acc, learn, d))
    parts += [_machine(acc, learn), _dataset(acc["dataset"]), _accuracy(acc), _grid(acc)]
    parts.append(_variants(acc))
    if learn is not None:
        parts.append(learning.section(learn))
    agent = load("agent.json")
    if agent is not None:
        parts.append(_agent(agent))
    talks = load("conversations.json")
    if talks is not None:
        from bench.conversations import section

        parts.append(section(talks))
    if perf_md.is_file():
        # The generated tables, then the prose that reads them (hand-written, kept out of the
        # generator so re-rendering never touches it).
        parts += [perf_md.read_text().strip(), perf.findings()]
    else:
        parts.append(_text("no_perf"))
    wrk = load("throughput.json")
    if wrk is not None:
        parts.append(_throughput(wrk))
    tenants = load("tenants.json")
    if tenants is not None:
        parts.append(_tenants(tenants))
    speed = load("embed_speed.json")
    if speed is not None:
        parts.append(_embed_speed(speed))
    parts += [_defaults(acc, learn, d), _text("commands")]
    return "\n\n".join(parts).rstrip() + "\n"


def _share(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.0f}%"


def _agent(agent: dict[str, Any]) -> str:
    """`python -m bench agent`: each variant against the usage and gold lines, then the
    held-out top-1 and the online recall@5 step by step."""
    steps = agent["steps"]
    spans = [f"after {b} (turns {a + 1}-{b})" for a, b in pairwise(steps)]
    rows: list[list[Any]] = []
    by_step: list[list[Any]] = []
    notes: list[str] = []
    for method, runs in agent["methods"].items():
        for r in runs:
            a, fold = r["audit"], r["fold"]
            tiers = ", ".join(
                f"{t} {v['correct']}/{v['saved']}" for t, v in sorted(a["exemplars"].items())
            )
            reference = r["mode"] != "observe"
            rows.append(
                [method, r["variant"], f"{pct(r['before']['top1'])} → {pct(r['after']['top1'])}",
                 f"{100 * r['gain_top1']:+.1f}", _share(r["of_usage_top1"]), _share(r["of_gold_top1"]),
                 f"{pct(r['before']['recall5'])} → {pct(r['after']['recall5'])}",
                 f"{100 * r['lowest_top1_vs_before']:+.1f}",
                 "" if reference else f"{a['teacher_calls']} / {a['flagged']}",
                 "" if reference else _share(a["fallback_to_teacher"]),
                 "" if reference else _share(a["decline_rate"]), tiers,
                 a["exemplars_on_wrong_tool"] if a["wrong_turns"] else "",
                 f"{fold['description_weight']:g} / {fold['usage_weight']:g} ({fold['source']})"]
            )  # fmt: skip
            by_step.append(
                [method, r["variant"]]
                + [f"{pct(p['top1'])} ({pct(p['online_recall5'])})" for p in r["points"][1:]]
                + [pct(r["online_recall5"])]
            )
            if r["wrong_share"] and r["wrong_outcome"] != "error":
                low = r["lowest_top1_vs_before"]
                met = "met" if low >= 0 else "**missed**"
                notes.append(
                    _text("agent_lowest", method=method, variant=r["variant"], lowest=f"{100 * low:+.1f}", met=met)
                )  # fmt: skip
            if r["wrong_share"] and r["wrong_outcome"] == "error":
                bad = a["exemplars_on_wrong_tool"]
                met = "met" if bad == 0 else "**missed**"
                notes.append(
                    _text("agent_wrong", method=method, variant=r["variant"], bad=bad, wrong_turns=a["wrong_turns"], met=met)
                )  # fmt: skip
    head = ["embedder", "variant", "top-1 %", "gain", "of usage", "of gold", "recall@5 %", "lowest",
            "calls / flagged", "fallback → teacher", "declines", "exemplars", "on wrong", "fold"]  # fmt: skip
    return _text(
        "agent",
        shown=agent["shown"],
        fallback=agent["fallback"],
        window=agent["window"],
        wrong_share=f"{100 * agent['wrong_share']:.0f}",
        table=table(head, rows, "ll" + "r" * 9 + "l" + "rl"),
        notes="".join(f"{n}\n" for n in notes) + "\n",
        by_step=table(
            ["embedder", "variant", *spans, "online recall@5 % all"],
            by_step,
            "ll" + "r" * len(steps),
        ),
    )


# Issue targets for `/v1/rank` throughput, as a share of the bare handler's.
THROUGHPUT_TARGETS = {"hashing, --workers 2": 0.50, "hybrid, --workers 2": 0.35}


def _throughput(wrk: dict[str, Any]) -> str:
    """`bench.throughput`: each arm's median req/s and its share of the bare handler's."""
    return _text("throughput", wrk=wrk, targets=THROUGHPUT_TARGETS)


def _tenants(result: dict[str, Any]) -> str:
    """`bench.tenants`: many tenants' memory and cold first request in one process, then
    `/v1/rank` throughput with ten tenants against one."""
    mem, wrk = result["memory"], result["throughput"]

    def p50_95(cell: dict[str, float]) -> str:
        return f"{ms(cell['p50'])} / {ms(cell['p95'])}"

    rows = []
    for name, a in mem["arms"].items():
        per, second = a["kb_per_live_tenant"], a.get("kb_per_live_tenant_second_half")
        per_kb = (
            "" if per is None else f"{per:,.0f}" + ("" if second is None else f" ({second:,.0f})")
        )
        rows.append(
            [name, a["embedder"], f"{a['tenants']:,} / {a['tenants_live']:,} / {a['live_at_end']:,}",
             f"{a['rss_base_mb']:.0f}", f"{a['rss_touched_mb']:,.0f}", f"{a['rss_peak_mb']:,.0f}",
             per_kb, f"{a['threads']:,}",
             f"{100 * a['idle_cpu_share']:.1f}%", p50_95(a["cold_ms"]), p50_95(a["cold_get_ms"]),
             ms(a["catalog_embed_ms"]["p50"]), p50_95(a["cold_again_ms"]), p50_95(a["warm_ms"])]
        )  # fmt: skip
    head = ["arm", "embedder", "tenants / bound / live at end", "RSS base MB", "RSS after MB",
            "peak MB", "KB per live tenant (second half)", "threads", "idle CPU", "cold first request ms",
            "of which start ms", "catalog embed ms", "started again ms", "warm request ms"]  # fmt: skip
    arms = []
    for name, a in wrk["arms"].items():
        each = ", ".join(ms(r["p99_ms"]) for r in a["runs"])
        arms.append(
            [name, f"{a['rps']:.0f}", ms(a["p50_ms"]), ms(a["p99_ms"]), each, f"{a['non_2xx']:.0f}"]
        )
    live, bounded, hybrid = (mem["arms"][k] for k in ("all live", "bounded", "hybrid"))
    reading = _text(
        "tenants_reading",
        kb=f"{live['kb_per_live_tenant']:,.0f}",
        tools=mem["tools"],
        tenants=f"{mem['tenants']:,}",
        idle=f"{100 * live['idle_cpu_share']:.1f}%",
        bound=bounded["tenants_live"],
        bounded_mb=f"{bounded['rss_touched_mb']:,.0f}",
        all_mb=f"{live['rss_touched_mb']:,.0f}",
        hashing_embed=ms(live["catalog_embed_ms"]["p50"]),
        hashing_start=ms(live["cold_get_ms"]["p50"]),
        hybrid_embed=ms(hybrid["catalog_embed_ms"]["p50"]),
        hybrid_start=ms(hybrid["cold_get_ms"]["p50"]),
        hybrid_again=ms(hybrid["cold_again_ms"]["p50"]),
        hashing_again=ms(live["cold_again_ms"]["p50"]),
        hybrid_warm=ms(hybrid["warm_ms"]["p50"]),
        hybrid_kb=f"{hybrid['kb_per_live_tenant']:,.0f}",
        hybrid_kb2=f"{hybrid['kb_per_live_tenant_second_half']:,.0f}",
    )
    neo = result.get("neo4j")
    if neo is not None:
        reading += "\n\n" + _text(
            "tenants_neo4j",
            command=neo["command"],
            tenants=neo["tenants"],
            tools=neo["tools"],
            cold=p50_95(neo["cold_ms"]),
        )
    return _text(
        "tenants",
        reading=reading,
        command=result["command"],
        wrk=result["wrk"],
        took=result["took_s"],
        load_end=_load(result["loadavg_end"]),
        cpu=_cpu(result),
        tenants=f"{mem['tenants']:,}",
        tools=mem["tools"],
        bound=mem["bound"],
        memory=table(head, rows, "ll" + "r" * 12),
        rank_tools=f"{wrk['tools']:,}",
        connections=wrk["connections"],
        duration=wrk["duration_s"],
        rounds=wrk["rounds"],
        server_rss=f"{wrk['server_rss_mb']:.0f}",
        throughput=table(["arm", "req/s", "p50 ms", "p99 ms", "p99 ms per run", "non-2xx"], arms),
        ratio=f"{wrk['ratio']:.2f}",
    )


# Issue targets for the dense embedder and the exec selector, in milliseconds (p50).
DENSE_QUERY_MS = 5.0
WARM_SPAWN_MS = 300.0


def _embed_speed(speed: dict[str, Any]) -> str:
    """`bench.embed_speed`: per-query embedding and `toolselect select` spawn times."""
    rows: list[list[str]] = []

    def row(what: str, cell: dict[str, float], unit: str, limit: float | None = None) -> None:
        met = "" if limit is None else ("yes" if cell["p50"] <= limit else "**no**")
        target = "" if limit is None else f"<= {limit:g} {unit}"
        p50, p90 = f"{cell['p50']:.2f} {unit}", f"{cell['p90']:.2f} {unit}"
        rows.append([what, str(cell["n"]), p50, p90, target, met])

    if "lexical" in speed:
        lex = speed["lexical"]
        row("hashing, scikit-learn's `HashingVectorizer.transform`", lex["sklearn_transform"], "µs")
        row("hashing, the single-query path", lex["current_inline"], "µs")
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
                row(what, dense[key], "ms", DENSE_QUERY_MS)
    sp = speed.get("spawn")
    if sp is not None:
        if "python_startup" in sp:
            row("`python -c pass` (the floor of a spawn)", sp["python_startup"], "ms")
        row("`select` spawn, cold (no vector cache, no kept graph)", sp["cold_no_cache"], "ms")
        row("`select` spawn, warm, new query (model from the kept graph)", sp["warm_new_query"], "ms", WARM_SPAWN_MS)  # fmt: skip
        row("`select` spawn, warm, new query, packaged graph", sp["warm_new_query_packaged_graph"], "ms")  # fmt: skip
        row("`select` spawn, warm, repeated query (no model load)", sp["warm_repeated_query"], "ms")
    out = _text(
        "embed_speed",
        command=speed["command"],
        load_start=_load(speed["loadavg_start"]),
        load_end=_load(speed["loadavg_end"]),
        cpu=_cpu(speed),
        table=table(["what", "calls", "p50", "p90", "target", "met"], rows),
    )
    if sp is None:
        return out
    interpreter = (
        "a virtualenv with the dev extras, whose imports add to each spawn"
        if sp["dev_extras_installed"]
        else "a virtualenv without the dev extras: a plain `pip install toolselect`"
    )
    spawns = _text(
        "embed_speed_spawns",
        interpreter=interpreter,
        candidates=sp["candidates"],
        embedder=sp["embedder"],
    )
    return f"{out}\n\n{spawns}"


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


def _summary(acc: dict[str, Any], learn: dict[str, Any] | None, d: dict[str, Any]) -> str:
    bm25, best = d["bm25"], d["best"]
    hashing = _method(acc, "hashing")
    rows = []
    for m in (best, hashing):
        rows.append(
            _target(f"{m['method']}: top-1 >= best BM25 + 5", m["top1"], bm25["top1"] + 0.05)
        )
        rows.append(_target(f"{m['method']}: recall@5 >= 80", m["recall5"], 0.80))
    if learn is not None:
        for method in learning.methods(learn):
            rows += learning.targets(learn, method)
    return _text(
        "summary",
        tools=acc["dataset"]["tools"],
        held=acc["dataset"]["held"],
        best=best["method"],
        best_top1=pct(best["top1"]),
        best_recall5=pct(best["recall5"]),
        bm25_top1=pct(bm25["top1"]),
        hashing_top1=pct(hashing["top1"]),
        table=table(["target", "measured", "limit", "met", "missed"], rows, "lrrll"),
    )


def _method(acc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in acc["methods"] if m["method"] == name)


def _findings(acc: dict[str, Any], learn: dict[str, Any], d: dict[str, Any]) -> str:
    """What the tables say, with the numbers read from them."""
    bm25, best = d["bm25"], d["best"]
    hashing, minilm = _method(acc, "hashing"), _method(acc, "minilm")
    out = [
        _text(
            "findings",
            best=best["method"],
            best_top1=pct(best["top1"]),
            minilm_top1=pct(minilm["top1"]),
            hashing_top1=pct(hashing["top1"]),
            bm25_top1=pct(bm25["top1"]),
            hashing_miss=f"{100 * (bm25['top1'] + 0.05 - hashing['top1']):.1f}",
            best_gain=f"{100 * (best['top1'] - bm25['top1']):+.1f}",
        )
    ]
    torch = load("accuracy_torch.json")
    if torch:
        before = _method(torch, "minilm")
        out.append(
            _text(
                "findings_onnx",
                minilm_top1=pct(minilm["top1"]),
                torch_top1=pct(before["top1"]),
                change=f"{100 * (minilm['top1'] - before['top1']):+.1f}",
            )
        )
    return "\n".join(out + learning.findings(learn))


def _machine(acc: dict[str, Any], learn: dict[str, Any] | None) -> str:
    m = acc["machine"]
    load_learn = learn["machine"]["loadavg"] if learn else None
    measured = f"{m['at']} (accuracy)" + (f", {learn['machine']['at']} (learning)" if learn else "")
    loads = _load(m["loadavg"]) + (
        f" (accuracy), {_load(load_learn)} (learning)" if load_learn else ""
    )
    rows = [
        ["CPU", f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB"],
        ["OS", m["platform"]],
        ["Python", m["python"]],
        ["BLAS (threadpoolctl)", "; ".join(m["blas"]) or "?"],
        ["measured", measured],
        ["load average at start (1/5/15 min)", loads],
    ]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    return _text("machine", table=table(["", ""], rows, "ll"), versions=versions)


def _load(values: list[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def _dataset(c: dict[str, Any]) -> str:
    cats = ", ".join(
        f"`{k}` {v['entries']} entries / {v['functions']} function definitions"
        for k, v in c["per_category"].items()
    )
    return _text("dataset", categories=cats, **c)


def _latency(lat: dict[str, Any], key: str) -> str:
    return f"{ms(lat[key].get('p50'))} / {ms(lat[key].get('p99'))}" if key in lat else ""


def _accuracy(acc: dict[str, Any]) -> str:
    rows = []
    for m in acc["methods"]:
        lat = m.get("latency_ms", {})
        cats = m.get("by_category", {})
        rows.append(
            [m["method"], pct(m["top1"]), pct(m["recall5"]), f"{m['mrr10']:.3f}",
             pct(cats.get("live_multiple", {}).get("top1")),
             pct(cats.get("simple_python", {}).get("top1")),
             _latency(lat, "embed"), _latency(lat, "rank"),
             f"{ms(lat.get('total', {}).get('p50'))} / {ms(lat.get('total', {}).get('p99'))}"]
        )  # fmt: skip
    sr = acc.get("semantic_router", {})
    if sr.get("status") == "ok":
        learned = sr.get("learned", {})
        sr_note = _text(
            "semantic_router",
            version=sr.get("version"),
            build_s=f"{sr.get('build_s', 0):.0f}",
            top1=pct(learned.get("top1")),
            recall5=pct(learned.get("recall5")),
        )
    else:
        sr_note = _text("semantic_router_skipped", reason=sr.get("reason", "not run"))
    head = ["method", "top-1 %", "recall@5 %", "MRR@10", "top-1 live_multiple",
            "top-1 simple_python", "embed ms", "rank ms", "total ms"]  # fmt: skip
    return _text(
        "accuracy",
        latency_n=acc["methods"][0].get("latency_ms", {}).get("n", "?"),
        table=table(head, rows, "lrrrrrrrr"),
        semantic_router=sr_note,
    )


def _grid(acc: dict[str, Any]) -> str:
    rows = [
        [f"{g['weight']:g}", pct(g["before"]["top1"]), pct(g["before"]["recall5"]),
         f"{g['before']['mrr10']:.3f}", pct(g["after_truth"]["top1"]), pct(g["after_truth"]["recall5"])]
        for g in acc["hybrid_grid"]
    ]  # fmt: skip
    head = ["weight", "top-1 %", "recall@5 %", "MRR@10", "top-1 % after", "recall@5 % after"]
    return _text("grid", table=table(head, rows))


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
    return _text("variants", table=table(["method", *variants], rows))


def _defaults(acc: dict[str, Any], learn: dict[str, Any] | None, d: dict[str, Any]) -> str:
    best, bm25 = d["best"], d["bm25"]
    weight = d["hybrid_weight"]
    hashing = _method(acc, "hashing")
    grid = {g["weight"]: g for g in acc["hybrid_grid"]}
    after = max(acc["hybrid_grid"], key=lambda g: g["after_truth"]["top1"])
    return _text(
        "defaults",
        embedder=d["embedder"],
        best=best["method"],
        best_top1=pct(best["top1"]),
        best_recall5=pct(best["recall5"]),
        best_gain=f"{100 * (best['top1'] - bm25['top1']):+.1f}",
        hashing_top1=pct(hashing["top1"]),
        hashing_gain=f"{100 * (hashing['top1'] - bm25['top1']):+.1f}",
        best_ms=ms(best.get("latency_ms", {}).get("total", {}).get("p50")),
        hashing_ms=ms(hashing["latency_ms"]["total"]["p50"]),
        weight=f"{weight:g}",
        weight_top1=pct(grid[weight]["before"]["top1"]),
        spread=f"{_spread(acc, weight):.1f}",
        after_weight=f"{after['weight']:g}",
        after_top1=pct(after["after_truth"]["top1"]),
        weight_after_top1=pct(grid[weight]["after_truth"]["top1"]),
        learning="".join(f"{line}\n" for line in learning.defaults(learn)) if learn else "",
        tool_text=_text("tool_text_full" if _full_wins(acc) else "tool_text_mixed"),
    )


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
