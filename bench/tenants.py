"""Tenants (issue 23): many tenants' memory and cold first request in one process, and
`/v1/rank` throughput with ten tenants against one under `wrk`.

`python -m bench.tenants [--tenants N] [--tools N] [--duration S] [--rounds N]` (needs `wrk`, as
`bench.throughput`; `--tenants 50` is a quick check). Memory: N tenants' SQLite stores, each
with its own synthetic catalog, are written first; then each arm starts `TenantServices` in a
fresh process (all live, the default bound, `hybrid` on 20) and reads its RSS while every tenant
takes a cold first request (`tenants.get` + `ranking.search`), then warm ones. Throughput: one
`toolselect serve` with the 1,000-tool catalog in 11 tenants; wrk sends one tenant's agent key
or ten tenants' in turn, arms interleaved, medians. Writes `bench/results/tenants.json`;
`python -m bench report` puts it in BENCHMARKS.md (the section says what each figure is).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import RESULTS, ROOT, read_result, write_json, wrk
from bench.perf.catalog import as_tools, synth_catalog, synth_queries
from bench.perf.machine import machine_facts, settle
from bench.perf.server import ServerProcess, server_env
from bench.stats import percentile, summary
from toolselect.logs import configure_logging

ADMIN = "k-bench-admin-4c1d"  # a TOOLSELECT_API_KEYS key: an admin of tenant `default`
RANK_TOOLS = 1_000  # per tenant in the throughput part, as in bench.throughput
HYBRID_TENANTS = 20


def _status(field: str) -> int:
    """A number of /proc/self/status (VmRSS, VmHWM in kB; Threads)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _rss_mb() -> float:
    gc.collect()  # what stays, not garbage a collection would free
    return _status("VmRSS") / 1024


async def _prepare(root: Path, tenants: int, tools: int) -> None:
    """Each tenant's store file with its own catalog (written through the store: nothing
    embedded, a started service re-embeds its catalog anyway) and five queries for it."""
    from toolselect.store.sqlite.store import SqliteStore

    queries = {}
    for i in range(tenants):
        catalog = synth_catalog(tools, seed=1_000 + i)  # seeded apart: distinct catalogs
        store = SqliteStore(root / "toolselect.db", tenant=f"t{i:04d}")
        await store.migrate()
        await store.upsert_tools(as_tools(catalog))
        await store.close()
        queries[f"t{i:04d}"] = synth_queries(catalog, 5, seed=i)
    (root / "queries.json").write_text(json.dumps(queries), encoding="utf-8")


async def _measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One arm, in a process of its own: RSS before and after touching every tenant, the
    cold and warm request latencies, idle CPU with them live (see the module docstring)."""
    from toolselect.catalog import tool_text
    from toolselect.config import Settings
    from toolselect.service import TenantServices

    configure_logging("warning")  # 1,000 `tenant_started` lines would time the terminal too
    root = Path(spec["dir"])
    queries: dict[str, list[str]] = json.loads((root / "queries.json").read_text())
    names = sorted(queries)[: spec["tenants"]]
    settings = Settings().override(
        data_dir=str(root / spec["embedder"]),  # each arm's own spools and MiniLM graph
        store=f"sqlite:{root / 'toolselect.db'}",
        embedder=spec["embedder"],
        teacher="none",
        query_cache=0,
        tenants_live=spec["live"],
    )
    services = await TenantServices.start(settings)
    # A catalog's worth of texts (of no tenant) before the baseline: the model loaded and its
    # arena grown (hybrid), the hashing n-gram memo filled, or the first tenants would carry it.
    spare = as_tools(synth_catalog(spec["tools"], seed=999))
    await services.default.embedder.embed([tool_text(t) for t in spare])
    base = _rss_mb()
    get_ms, first_ms = [], []
    half = base
    for i, name in enumerate(names):
        if i == len(names) // 2:
            half = _rss_mb()  # the second half's growth: per tenant, without first-use costs
        t0 = time.perf_counter()
        service = await services.get(name)
        t1 = time.perf_counter()
        await service.ranking.search(queries[name][0])
        get_ms.append(1e3 * (t1 - t0))
        first_ms.append(1e3 * (time.perf_counter() - t1))
    touched = _rss_mb()
    rng = random.Random(7)
    live = services.live
    warm_ms = []
    for _ in range(min(1_000, 20 * len(live))):
        name = rng.choice(live)
        t0 = time.perf_counter()
        service = await services.get(name)
        await service.ranking.search(rng.choice(queries[name][1:]))
        warm_ms.append(1e3 * (time.perf_counter() - t0))
    # What a cold start spends re-embedding its catalog (a started service embeds every tool).
    embed_ms = []
    for name in names[:20]:
        texts = [tool_text(t) for t in await (await services.get(name)).store.list_tools()]
        t0 = time.perf_counter()
        await services.default.embedder.embed(texts)
        embed_ms.append(1e3 * (time.perf_counter() - t0))
    # A tenant started again after it was closed (idle or evicted): with a model embedder its
    # catalog's vectors come from the disk (TOOLSELECT_VECTOR_CACHE), not from the model.
    again_ms = []
    for name in names[:20]:
        await services.close_tenant(name)
        t0 = time.perf_counter()
        await (await services.get(name)).ranking.search(queries[name][0])
        again_ms.append(1e3 * (time.perf_counter() - t0))
    # Every live service keeps its upkeep task and store thread: what they cost when idle.
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(spec["idle_s"])
    idle_cpu = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    threads = _status("Threads")
    t0 = time.perf_counter()
    await services.close()
    total = [g + f for g, f in zip(get_ms, first_ms, strict=True)]

    def per_tenant(since: float, count: int) -> float | None:
        # Only where no tenant was closed: with evictions the growth is not the live ones'.
        return round(1024 * (touched - since) / count, 1) if len(live) == len(names) else None

    return {
        "embedder": spec["embedder"],
        "tenants": len(names),
        "tenants_live": spec["live"],
        "live_at_end": len(live),
        "rss_base_mb": round(base, 1),
        "rss_half_mb": round(half, 1),
        "rss_touched_mb": round(touched, 1),
        "rss_peak_mb": round(_status("VmHWM") / 1024, 1),
        "kb_per_live_tenant": per_tenant(base, len(names)),
        "kb_per_live_tenant_second_half": per_tenant(half, len(names) - len(names) // 2),
        "threads": threads,
        "idle_cpu_share": round(idle_cpu, 4),
        "close_all_s": round(time.perf_counter() - t0, 2),
        "cold_ms": summary(total, (0.5, 0.95)),
        "cold_get_ms": summary(get_ms, (0.5, 0.95)),
        "cold_first_rank_ms": summary(first_ms, (0.5, 0.95)),
        "cold_again_ms": summary(again_ms, (0.5, 0.95)),
        "catalog_embed_ms": summary(embed_ms, (0.5, 0.95)),
        "warm_ms": summary(warm_ms, (0.5, 0.95)),
    }


def _arm(spec: dict[str, Any]) -> dict[str, Any]:
    """`_measure` in a fresh interpreter: no page of an earlier arm counts in its RSS."""
    argv = [sys.executable, "-m", "bench.tenants", "--arm", json.dumps(spec)]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1_200, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def memory(tenants: int, tools: int) -> dict[str, Any]:
    bound = min(100, max(1, tenants // 10))
    with tempfile.TemporaryDirectory(prefix="toolselect-tenants-") as tmp:
        t0 = time.perf_counter()
        asyncio.run(_prepare(Path(tmp), tenants, tools))
        print(f"prepared {tenants} stores in {time.perf_counter() - t0:.0f} s", flush=True)
        arms = {}
        for name, embedder, n, live in (
            ("all live", "hashing", tenants, tenants),
            ("bounded", "hashing", tenants, bound),
            ("hybrid", "hybrid", min(HYBRID_TENANTS, tenants), tenants),
        ):
            spec = {"dir": tmp, "embedder": embedder, "tenants": n, "live": live, "tools": tools}
            spec["idle_s"] = 10
            busy = settle(60)  # the machine is shared: start each arm on a quiet one if we can
            arms[name] = {**_arm(spec), "busy_cores_before": round(busy, 2)}
            print(f"  {name}: {json.dumps(arms[name])}", flush=True)
    return {"tenants": tenants, "tools": tools, "bound": bound, "arms": arms}


def throughput(duration: int, rounds: int) -> dict[str, Any]:
    catalog = synth_catalog(RANK_TOOLS)
    queries = synth_queries(catalog, 200)
    runs: dict[str, list[dict[str, float]]] = {"1 tenant": [], "10 tenants": []}
    with tempfile.TemporaryDirectory(prefix="toolselect-tenants-wrk-") as tmp:
        workdir = Path(tmp)
        env = server_env(f"sqlite:{workdir / 'toolselect.db'}", workdir)
        # Rate limits off (0, also their default): the bench measures the server, not them.
        env.update(TOOLSELECT_API_KEYS=ADMIN, TOOLSELECT_TENANT_RPS="0", TOOLSELECT_GLOBAL_RPS="0")
        with ServerProcess(env, workdir, ["--workers", "1"]) as server:
            tenants = ["solo", *(f"w{i:02d}" for i in range(1, 11))]
            keys = {}
            admin = {"Authorization": f"Bearer {ADMIN}"}
            for tenant in tenants:
                as_tenant = {**admin, "X-Toolselect-Tenant": tenant}
                server.post("/v1/tools", {"tools": catalog}, "PUT", as_tenant)
                made = server.post("/v1/keys", {"tenant": tenant, "role": "agent"}, headers=admin)
                keys[tenant] = made["key"]
            scripts = {"1 tenant": workdir / "one.lua", "10 tenants": workdir / "ten.lua"}
            scripts["1 tenant"].write_text(wrk.rank_script(queries, [keys["solo"]]))
            scripts["10 tenants"].write_text(
                wrk.rank_script(queries, [keys[t] for t in tenants[1:]])
            )
            busy = settle(60)
            for round_ in range(rounds):
                # Alternate which arm goes first, so a drift in the machine favours neither.
                order = list(runs) if round_ % 2 == 0 else list(reversed(runs))
                for name in order:
                    wrk.run(server.url, scripts[name], 2)  # warm-up (and every tenant live)
                    result = wrk.run(server.url, scripts[name], duration)
                    runs[name].append(result)
                    print(f"  round {round_ + 1} {name}: {result['rps']:.0f} req/s", flush=True)
            rss = server.rss_mb()
    arms: dict[str, dict[str, Any]] = {
        name: {
            **{m: percentile((r[m] for r in rs), 0.5) for m in ("rps", "p50_ms", "p99_ms")},
            "non_2xx": sum(r["non_2xx"] for r in rs),
            "runs": rs,
        }
        for name, rs in runs.items()
    }
    return {
        "tools": RANK_TOOLS,
        "connections": wrk.CONNECTIONS,
        "duration_s": duration,
        "rounds": rounds,
        "server_rss_mb": rss,
        "busy_cores_before": round(busy, 2),
        "ratio": arms["10 tenants"]["rps"] / arms["1 tenant"]["rps"],
        "arms": arms,
    }


async def _neo4j_cold(tenants: int, tools: int) -> dict[str, Any]:
    """Cold first requests on the Neo4j of `NEO4J_URI`: `tenants` tenants of `tools` tools each
    (written first through their stores, under a prefix deleted afterwards), then each one's
    `tenants.get` + first `ranking.search` in a `TenantServices` started here: the tenants share
    the default store's driver and its migrated schema."""
    import neo4j

    from toolselect.config import load_settings
    from toolselect.service import TenantServices
    from toolselect.store.factory import open_store

    prefix = f"bench{int(time.time())}"
    names = [f"{prefix}-{i:03d}" for i in range(tenants)]
    with tempfile.TemporaryDirectory(prefix="toolselect-neo4j-") as tmp:
        env = {**os.environ, "TOOLSELECT_STORE": "neo4j", "TOOLSELECT_EMBEDDER": "hashing",
               "TOOLSELECT_DATA_DIR": tmp, "TOOLSELECT_TEACHER": "none"}  # fmt: skip
        settings = load_settings(env).override(query_cache=0)
        base = await open_store(settings)
        await base.migrate()
        queries = {}
        for i, name in enumerate(names):
            store = await open_store(settings, tenant=name, beside=base)
            await store.migrate()
            catalog = synth_catalog(tools, seed=2_000 + i)
            await store.upsert_tools(as_tools(catalog))
            queries[name] = synth_queries(catalog, 1, seed=i)[0]
        await base.close()
        services = await TenantServices.start(settings)
        cold_ms = []
        try:
            for name in names:
                t0 = time.perf_counter()
                await (await services.get(name)).ranking.search(queries[name])
                cold_ms.append(1e3 * (time.perf_counter() - t0))
        finally:
            await services.close()
    auth = (settings.neo4j_username, settings.neo4j_password) if settings.neo4j_password else None
    async with (
        neo4j.AsyncGraphDatabase.driver(settings.neo4j_uri, auth=auth) as driver,
        driver.session(database=settings.neo4j_database) as session,
    ):
        # Auto-commit: `IN TRANSACTIONS` needs it.
        done = await session.run(
            "MATCH (n) WHERE n.tenant STARTS WITH $prefix "
            "CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 10000 ROWS",
            prefix=prefix + "-",
        )
        await done.consume()
    return {"tenants": tenants, "tools": tools, "cold_ms": summary(cold_ms, (0.5, 0.95))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=1_000, help="tenants in one process")
    parser.add_argument("--tools", type=int, default=100, help="tools per tenant (memory part)")
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per arm")
    parser.add_argument(
        "--neo4j", action="store_true", help="only the cold tenants on NEO4J_URI, into the results"
    )
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.arm:
        print(json.dumps(asyncio.run(_measure(json.loads(args.arm)))))
        return 0
    if args.neo4j:
        configure_logging("warning")
        saved = read_result("tenants.json")
        if saved is None:
            print("python -m bench.tenants --neo4j adds to a full run's results", file=sys.stderr)
            return 2
        saved["neo4j"] = asyncio.run(_neo4j_cold(50, args.tools))
        saved["neo4j"]["command"] = (
            f"NEO4J_URI=... python -m bench.tenants --neo4j --tools {args.tools}"
        )
        write_json(RESULTS / "tenants.json", saved)
        print(f"neo4j: {json.dumps(saved['neo4j'])}")
        return 0
    if not wrk.installed():
        print(wrk.MISSING, file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # MiniLM comes from a package, never a hub
    configure_logging("warning")  # no `store_migrated` line per prepared store
    facts = machine_facts()
    started = time.perf_counter()
    report: dict[str, Any] = {
        "command": "python -m bench.tenants "
        + " ".join(f"--{k} {v}" for k, v in vars(args).items() if k != "arm"),
        "wrk": wrk.version(),
        "machine": facts,
        "memory": memory(args.tenants, args.tools),
        "throughput": throughput(args.duration, args.rounds),
        "took_s": 0.0,
        "loadavg_end": list(os.getloadavg()),
    }
    report["took_s"] = round(time.perf_counter() - started)
    write_json(RESULTS / "tenants.json", report)
    print(f"10 tenants / 1 tenant: {report['throughput']['ratio']:.2f} in {report['took_s']} s")

    return 0


if __name__ == "__main__":
    raise SystemExit(main())
