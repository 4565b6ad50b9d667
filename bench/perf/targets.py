"""The issue's targets and how each run measures against them (met, or missed by how much)."""

from __future__ import annotations

from typing import Any

TARGETS = {
    "ranker_p50_ms_10k": 1.0,
    "http_rps_hashing_1k": 2000.0,
    "select_url_cold_p50_ms": 150.0,
    # Learning loop v2: turns recorded per second into Neo4j (intake section).
    "intake_neo4j_unflagged_tps": 5000.0,
    "intake_neo4j_flagged_tps": 2000.0,
    "intake_neo4j_usage_labelled_tps": 2000.0,
}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with its measurement, whether it is met, and by how much it is missed."""
    out = []
    rows = results.get("inproc", {}).get("rows", [])
    best = [r for r in rows if r["tools"] == 10_000]
    for r in best:
        out.append(_target(
            f"ranker alone p50 at 10,000 tools ({r['embedder']}, BLAS threads {r['blas_threads']})",
            r["ranker_alone"]["p50_ms"], TARGETS["ranker_p50_ms_10k"], "ms", lower=True,
        ))  # fmt: skip
    levels = results.get("http", {}).get("levels", [])
    if levels:
        top = max(levels, key=lambda x: x["throughput_rps"])
        out.append(_target(
            f"/v1/rank throughput, hashing, 1,000 tools (best: {top['concurrency']} clients)",
            top["throughput_rps"], TARGETS["http_rps_hashing_1k"], "req/s", lower=False,
        ))  # fmt: skip
    if "cold" in results:
        out.append(_target(
            "`toolselect select --url` cold start p50",
            results["cold"]["select_url"]["p50_ms"], TARGETS["select_url_cold_p50_ms"], "ms",
            lower=True,
        ))  # fmt: skip
    for r in results.get("intake", []):
        if r["store"] != "neo4j":
            continue
        if r.get("query_cache"):
            cases = [("unflagged", "requests ranked before they were reported, query cache on")]
            if "usage_labelled" in r:
                cases.append(("usage_labelled", "ranked first, reported `ok`: a usage label each"))
        else:
            # Flagged requests are unique here (never ranked), so the cache cannot serve them.
            cases = [("unflagged", "every turn embedded by the worker, query cache off"),
                     ("flagged", "unique requests, embedded by the worker")]  # fmt: skip
        for name, how in cases:
            key = "flagged_ranker_tier" if name == "flagged" else name
            out.append(_target(
                f"intake into Neo4j, {name} turns ({how})",
                r[key]["turns_per_s"], TARGETS[f"intake_neo4j_{name}_tps"], "turns/s",
                lower=False,
            ))  # fmt: skip
    for load in results.get("load", []):
        out.append({"target": f"load on {load['store']}: zero errors",
                    "measured": load["errors"], "limit": 0, "met": load["errors"] == 0,
                    "miss": ""})  # fmt: skip
        change = load["rss_mb"]["change_pct"]
        out.append({"target": f"load on {load['store']}: RSS flat within 10%",
                    "measured": f"{change:+.1f}%", "limit": "±10%", "met": abs(change) <= 10,
                    "miss": "" if abs(change) <= 10 else f"{abs(change) - 10:.1f} points over"})  # fmt: skip
    return out


def _target(name: str, value: float, limit: float, unit: str, *, lower: bool) -> dict[str, Any]:
    met = value <= limit if lower else value >= limit
    miss = ""
    if not met:
        gap = value - limit if lower else limit - value
        miss = f"by {gap:.2f} {unit} ({gap / limit * 100:.0f}%)"
    return {"target": name, "measured": f"{value:g} {unit}", "limit": f"{limit:g} {unit}",
            "met": met, "miss": miss}  # fmt: skip
