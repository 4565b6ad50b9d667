"""Section `load`: open-loop 90% `/v1/rank` / 10% `/v1/observe` at a fixed rate, per store.

Latency counts from each request's scheduled send time (no coordinated omission); the
server's RSS is sampled every second, and its graceful stop timed at the end.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from bench import vegeta
from bench.perf.machine import busy_since, proc_stat
from bench.perf.server import ServerProcess, import_catalog, server_env
from bench.perf.stores import recorded_turns, store_settings, wipe_neo4j

# The mix: every tenth request is `/v1/observe`, the others `/v1/rank`.
OBSERVE_EVERY = 10


def bench_load(
    store: str, catalog_path: Path, queries: list[str], rate: float, quick: bool
) -> dict[str, Any]:
    """Open-loop 90% rank / 10% observe against a fresh server; RSS sampled every second."""
    duration, warmup = (10.0, 2.0) if quick else (60.0, 5.0)
    with tempfile.TemporaryDirectory(prefix="toolselect-load-") as tmp:
        workdir = Path(tmp)
        # One description of the store for the server and for the count read after it.
        settings = store_settings(store, workdir, db_name="load.db")
        if store == "neo4j":
            wipe_neo4j()
        env = server_env(settings.store, workdir)
        # The search log (a `search_id` per ranking) grows until TOOLSELECT_SEARCHES_KEPT and
        # then stays: sized to fill during the warm-up, so RSS rising in the measured window is
        # a leak and not the log filling (the default 100,000 takes ~4 minutes at 500 req/s).
        searches_kept = int(rate * warmup * (OBSERVE_EVERY - 1) / OBSERVE_EVERY)
        env["TOOLSELECT_SEARCHES_KEPT"] = str(searches_kept)
        import_catalog(env, catalog_path, workdir)
        with ServerProcess(env, workdir) as server:
            observe_bodies = []
            for i, q in enumerate(queries[:200]):
                top = server.post("/v1/rank", {"query": q, "k": 2})["results"][0]["tool"]
                # one in five turns used a fallback tool: flagged, labelled by the free tier
                observe_bodies.append({"request": q, "used_tool": top if i % 5 else "shell_exec"})
            rss_idle = server.rss_mb()
            samples: list[tuple[float, float]] = []
            t0, cpu0, machine0 = time.perf_counter(), server.cpu_s(), proc_stat()
            targets = [
                ("/v1/observe", observe_bodies[i // OBSERVE_EVERY % len(observe_bodies)])
                if i % OBSERVE_EVERY == OBSERVE_EVERY - 1
                else ("/v1/rank", {"query": queries[i % len(queries)], "k": 5})
                for i in range(OBSERVE_EVERY * len(observe_bodies))
            ]
            with ThreadPoolExecutor(1) as pool:
                running = pool.submit(vegeta.open_loop, server.url, targets, rate, duration, warmup)
                while not wait([running], timeout=1.0).done:
                    samples.append((round(time.perf_counter() - t0, 1), server.rss_mb()))
                result = running.result()
            wall = time.perf_counter() - t0
            result["server_cpu_cores"] = round((server.cpu_s() - cpu0) / wall, 2)
            others = (
                busy_since(machine0) - result["server_cpu_cores"] - result["client_cpu_s"] / wall
            )
            result["other_cpu_cores"] = round(max(0.0, others), 2)
            time.sleep(1.0)  # let the intake worker finish the last batch
            drops = server.metric("toolselect_observe_dropped_total")
            dropped = sum(drops.values())
            observed = sum(server.metric("toolselect_observed_turns_total").values())
            stopped = server.stop()
        # Read once the server has let go of the store; the run started on an empty one.
        recorded = sum(asyncio.run(recorded_turns(settings)).values())
    after_warmup = [rss for t, rss in samples if t >= warmup] or [rss_idle]
    result.update(
        store=store,
        load_generator=vegeta.version(),
        searches_kept=searches_kept,
        rss_mb={
            "idle": rss_idle,
            "start": after_warmup[0],
            "end": after_warmup[-1],
            "max": max(after_warmup),
            "change_pct": round((after_warmup[-1] / after_warmup[0] - 1) * 100, 1),
            "samples": samples,
        },
        observe_dropped=dropped,
        observe_dropped_by_reason=drops,
        observe_queued=observed,
        turns_recorded=recorded,
        shutdown=stopped,
    )
    print(
        f"  load {store:6} {rate:.0f} req/s x {duration:.0f} s: sent {result['sent']}, "
        f"errors {result['errors']}, p50 {result['latency']['p50_ms']:.2f} ms, "
        f"p99 {result['latency']['p99_ms']:.2f} ms, RSS {after_warmup[0]} -> "
        f"{after_warmup[-1]} MB, dropped {dropped:.0f}, turns {recorded}/{observed:.0f}",
        flush=True,
    )
    return result
