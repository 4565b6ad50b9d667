"""The results of a run: bench/results/perf.json, and perf.md rendered from it.

perf.md holds only tables generated from the JSON; the prose that reads them is written by
hand in FINDINGS.md beside this module, and `python -m bench report` puts it after the tables
in BENCHMARKS.md, so no figure is typed into Python and re-rendering never touches the prose.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.markdown import hand_written, table
from bench.perf.targets import targets

FINDINGS = Path(__file__).with_name("FINDINGS.md")


def findings() -> str:
    """The hand-written findings (Markdown) to follow the generated tables."""
    return hand_written(FINDINGS)


def write(results: dict[str, Any], results_dir: Path) -> Path:
    """perf.json and perf.md in `results_dir`; returns the JSON's path."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / "perf.json"
    path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    (results_dir / "perf.md").write_text(render_markdown(results), encoding="utf-8")
    return path


def rerender(results_dir: Path) -> Path:
    """perf.md rewritten from the perf.json beside it (no runs); returns its path."""
    results = json.loads((results_dir / "perf.json").read_text(encoding="utf-8"))
    path = results_dir / "perf.md"
    path.write_text(render_markdown(results), encoding="utf-8")
    return path


def _ms(x: float) -> str:
    return f"{x:.3f}" if x < 1 else f"{x:.2f}" if x < 100 else f"{x:.0f}"


def render_markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    blas = "; ".join(
        f"{b['user_api']} `{b['library']}` {b['version'] or ''} ({b['package']}, "
        f"{b['architecture'] or 'n/a'}): {b['num_threads']} threads"
        for b in m["blas"]
    )
    run = "quick smoke run" if results["quick"] else "full run"
    lines = [
        "## Latency, throughput and load",
        "",
        "Produced by "
        + "; ".join(
            f"`{r['command']}` ({', '.join(r['sections'])}; finished {r.get('finished_at')})"
            for r in results.get("runs", [])
        )
        + f" ({run}). Medians unless noted. The machine is shared: before each section the run waits for "
        "other work to leave the CPU (bounded), and every table says how many cores other "
        "processes used while it was measured.",
        "",
        table(["machine", ""], [
            ["CPU", f"{m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB RAM"],
            ["Python / numpy", f"{m['python']} / {m['numpy']}"],
            ["scheduling of the run", f"nice {m.get('nice', 0)}, session {m.get('autogroup')}"],
            ["thread pools (threadpoolctl)", blas],
            ["load average at start / end", f"{m['loadavg_at_start']} / {m.get('loadavg_at_end')}"],
            ["busy cores before each section", ", ".join(
                f"{k} {v}" for k, v in results.get("busy_cores_before", {}).items())],
        ], "ll"),
        "",
        "### Targets",
        "",
        table(["target", "measured", "limit", "met", "missed by"], [
            [t["target"], t["measured"], t["limit"], "yes" if t["met"] else "**no**", t["miss"]]
            for t in targets(results)
        ], "lllll"),
    ]  # fmt: skip
    if "inproc" in results:
        rows = [
            [r["embedder"], f"{r['tools']:,}", r["blas_threads"],
             _ms(r["ranker_alone"]["p50_ms"]), _ms(r["ranker_alone"]["p99_ms"]),
             _ms(r["embed_and_rank"]["p50_ms"]), _ms(r["embed_and_rank"]["p99_ms"])]
            for r in results["inproc"]["rows"]
        ]  # fmt: skip
        lines += ["", "### In-process rank (k = 5, 500 distinct queries)", "", table(
            ["embedder", "tools", "BLAS threads", "ranker p50 ms", "ranker p99 ms",
             "embed + rank p50 ms", "embed + rank p99 ms"], rows, "lrlrrrr")]  # fmt: skip
    if "http" in results:
        rows = [
            [lv["concurrency"], f"{lv['throughput_rps']:.0f}", _ms(lv["latency"]["p50_ms"]),
             _ms(lv["latency"]["p99_ms"]), lv["errors"], lv["server_cpu_cores"],
             lv["server_cpu_us_per_request"], lv["client_cpu_cores"], lv["other_cpu_cores"]]
            for lv in results["http"]["levels"]
        ]  # fmt: skip
        lines += ["", "### HTTP `/v1/rank` (1,000 tools, hashing, SQLite store, closed loop)", "",
                  table(["clients", "req/s", "p50 ms", "p99 ms", "errors", "server CPU cores",
                           "server CPU µs/request", "load generator CPU cores",
                           "other processes' cores"], rows, "rrrrrrrrr")]  # fmt: skip
    if "cold" in results:
        c = results["cold"]
        rows = [
            [name, c[key]["n"], _ms(c[key]["p50_ms"]), _ms(c[key]["p90_ms"])]
            for name, key in (
                ("`toolselect select --url` (thin client)", "select_url"),
                ("`python -c pass` (the interpreter's floor)", "python_startup"),
                ("`toolselect select` in-process (opens the store, embeds 1,000 tools)",
                 "select_in_process"),
            )
        ]  # fmt: skip
        lines += ["", "### Cold start of `toolselect select`, spawned per call (20 candidates)",
                  "", table(["what", "calls", "p50 ms", "p90 ms"], rows, "lrrr"), "",
                  f"`python -X importtime` of one `--url` call "
                  f"({c['importtime_url'][0]['total_import_ms']} ms of imports in all, inflated "
                  "by the tracing itself); top-level imports by cumulative time:", "",
                  table(["module", "cumulative ms", "self ms"],
                          [[f"`{r['module']}`", f"{r['cumulative_ms']:.1f}", f"{r['self_ms']:.1f}"]
                           for r in c["importtime_url"][1:]], "lrr")]  # fmt: skip
    if "intake" in results:
        rows = []
        for r in results["intake"]:
            for name in ("unflagged", "flagged_ranker_tier", "usage_labelled"):
                if name not in r:  # results of a run before usage labels
                    continue
                s = r[name]
                tiers = ", ".join(f"{k}: {v}" for k, v in sorted(s["tier_result"].items()))
                rows.append([
                    r["store"], f"{r.get('query_cache', 0):,}",
                    f"{r['observe_call']['p50_ms'] * 1e3:.1f}",
                    f"{r['observe_call']['p99_ms'] * 1e3:.1f}", name,
                    f"{s['recorded']:,} / {s['turns']:,}", f"{s['turns_per_s']:.0f}", tiers,
                ])  # fmt: skip
        lines += ["", "### Learning intake (in-process `Service`, 1,000 tools, hashing)", "",
                  "`observe()` is timed over 10,000 calls (2,000 quick); throughput is turns "
                  "recorded in the store per second, from the first `observe()` to a drained "
                  f"queue, the median of {results['intake'][0].get('rounds', 1)} interleaved "
                  "rounds (each round's figure in perf.json). The intake worker takes what is queued, up to 512 turns a batch, and "
                  "per batch ranks them on one snapshot and makes one ratchet lookup, one "
                  "`record_turns` and one `save_exemplars` call (one transaction each). Flagged turns use `shell_exec` on a request the ranker is confident "
                  "about (a unique suffix each, so every one is labelled by the free tier and "
                  "saved, never short-cut by the ratchet); those below the margin floor go to the "
                  "teacher tier, which is off here, and are declined. Every request was "
                  "ranked once before the run (as a runtime ranks before it reports a turn): "
                  "with the default query cache (`TOOLSELECT_QUERY_CACHE`) the intake worker "
                  "reuses those vectors, with 0 it embeds every turn.", "",
                  table(["store", "query cache", "`observe()` p50 µs", "`observe()` p99 µs",
                           "turns", "recorded / sent", "turns/s",
                           "decided as (tier/result: turns)"],
                          rows, "lrrrlrrl")]  # fmt: skip
    if "load" in results:
        rows = []
        for r in results["load"]:
            rss, by, stop = r["rss_mb"], r["by_path"], r["shutdown"]
            rows.append([
                r["store"], f"{r['rate']:.0f} × {r['duration_s']:.0f} s", f"{r['sent']:,}",
                r["errors"], _ms(r["latency"]["p50_ms"]), _ms(r["latency"]["p99_ms"]),
                _ms(by.get("/v1/rank", {}).get("p99_ms", 0)),
                _ms(by.get("/v1/observe", {}).get("p99_ms", 0)),
                f"{rss['start']} → {rss['end']} ({rss['change_pct']:+.1f}%, max {rss['max']})",
                f"{r['observe_dropped']:.0f}",
                f"{r['turns_recorded']:,} / {int(r['observe_queued']):,}",
                f"{stop.get('exit_code')}, {stop.get('stop_s')} s",
                f"{r.get('server_cpu_cores')} / {r.get('other_cpu_cores')}",
            ])  # fmt: skip
        lines += ["", "### Fixed-rate mixed load (open loop: 90% `/v1/rank`, 10% `/v1/observe`)",
                  "", "Latency counts from each request's scheduled send time (no coordinated "
                  "omission). RSS of the server from /proc/PID/status, sampled every second "
                  "after the warm-up. One in five observed turns used `shell_exec` (flagged).",
                  "", table(["store", "rate req/s × time", "sent", "errors", "p50 ms",
                               "p99 ms", "rank p99 ms", "observe p99 ms", "RSS MB start → end",
                               "observe drops", "turns recorded / queued", "SIGTERM exit, stop",
                               "server / other CPU cores"], rows, "llrrrrrrlrrll")]  # fmt: skip
    return "\n".join([*lines, ""])
