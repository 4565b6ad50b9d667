"""Section `http`: closed-loop `/v1/rank` at 1, 8 and 64 clients (vegeta) against the server
process.

The server's CPU per request comes from /proc, so a saturated core shows as such even when
a neighbour's work slows the whole machine.
"""

from __future__ import annotations

import time
from typing import Any

from bench import vegeta
from bench.perf.machine import busy_since, proc_stat
from bench.perf.server import ServerProcess


def bench_http(server: ServerProcess, queries: list[str], quick: bool) -> dict[str, Any]:
    """Closed-loop `/v1/rank` at 1, 8 and 64 clients; server CPU use per level from /proc."""
    duration, warmup = (3.0, 1.0) if quick else (10.0, 2.0)
    targets = [("/v1/rank", {"query": q, "k": 5}) for q in queries]
    levels = []
    for clients in (1, 8, 64):
        cpu0, wall0, machine0 = server.cpu_s(), time.perf_counter(), proc_stat()
        result = vegeta.closed(server.url, targets, clients, duration, warmup)
        result["server_cpu_cores"] = round(
            (server.cpu_s() - cpu0) / (time.perf_counter() - wall0), 2
        )
        result["client_cpu_cores"] = round(result["client_cpu_s"] / result["client_wall_s"], 2)
        result["machine_busy_cores"] = busy_since(machine0)
        # what neither the server nor the load generator used: a neighbour's work
        result["other_cpu_cores"] = round(
            max(
                0.0,
                result["machine_busy_cores"]
                - result["server_cpu_cores"]
                - result["client_cpu_cores"],
            ),
            2,
        )
        result["server_cpu_us_per_request"] = round(
            (server.cpu_s() - cpu0)
            / max(result["completed_ok"], 1)
            * 1e6
            * duration
            / (duration + warmup)
        )
        levels.append(result)
        print(
            f"  http clients={clients:>3}: {result['throughput_rps']:.0f} req/s, "
            f"p50 {result['latency']['p50_ms']:.2f} ms, p99 {result['latency']['p99_ms']:.2f} ms, "
            f"errors {result['errors']}, server {result['server_cpu_cores']} cores, "
            f"client {result['client_cpu_cores']} cores, others {result['other_cpu_cores']} cores",
            flush=True,
        )
    return {
        "tools": 1000,
        "embedder": "hashing",
        "store": "sqlite",
        "load_generator": vegeta.version(),
        "levels": levels,
    }
