"""`python -m bench.experiments.volume`: production volume for usage labels, one catalog, many
turns.

Every turn an agent reports `ok` with a catalog tool may now carry a label, so the store must
stay within its caps however much traffic comes. This drives `--turns` (default 1,000,000) turns
through a real in-process `Service` (hashing embedder, no teacher; SQLite, or Neo4j when
`NEO4J_URI` is set and `--store neo4j`) over the 1,000-tool synthetic catalog: requests are
drawn Zipf-like from a pool of `--distinct` (default 200,000) agent-like requests, so popular
ones repeat (counted on one exemplar) and the tail keeps adding new ones (evicted by the caps).
Each request is ranked first and used with its top-1, reported `ok` with its search id (the
runtime's flow). Prints JSON: throughput, the stored exemplars against `per_tool` and `total`,
the largest per-tool count, and the sightings the counts hold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from bench.perf.catalog import SEED, as_tools, catalog_file, synth_queries
from bench.perf.stores import store_settings, wipe_neo4j
from toolselect.service import Service

CHUNK = 2_000


async def run(store: str, turns: int, distinct: int, workdir: Path) -> dict[str, Any]:
    if store == "neo4j":
        wipe_neo4j()
    settings = store_settings(store, workdir, db_name="volume.db", query_cache=2048)
    catalog = json.loads(catalog_file(1_000).read_text())["tools"]
    base = synth_queries(catalog, 2_000, seed=SEED + 7)
    rng = np.random.default_rng(SEED)
    # Zipf-like popularity over the pool; each pool entry is a base request with a variant tag.
    ranks = np.arange(1, distinct + 1, dtype=np.float64)
    weights = ranks**-1.1
    weights /= weights.sum()
    service = await Service.start(settings)
    try:
        await service.catalog.upsert_tools(as_tools(catalog))
        started = time.perf_counter()
        sent = 0
        while sent < turns:
            picks = rng.choice(distinct, size=min(CHUNK, turns - sent), p=weights)
            for pick in picks.tolist():
                request = f"{base[pick % len(base)]} #{pick // len(base)}"
                search = await service.ranking.search(request, 5)
                if service.learner.depth >= settings.queue_size - 1:
                    await service.learner.drain(600)  # the bounded queue would drop the turn
                assert service.learning.observe(
                    request,
                    search.ranking.results[0].tool,
                    outcome="ok",
                    search_id=search.search_id,
                )
            sent += len(picks)
            await service.learner.drain(600)
            if sent % 100_000 < CHUNK:
                print(f"  {sent:,} turns, {service.ranker.exemplar_total:,} exemplars", flush=True)
        elapsed = time.perf_counter() - started
        per_tool: Counter[str] = Counter()
        sightings = 0
        for tool in service.ranker.names:
            held = await service.store.exemplars_for_tool(tool)
            per_tool[tool] = len(held)
            sightings += sum(e.count for e in held)
        stored = sum(per_tool.values())
        return {
            "store": store,
            "turns": turns,
            "distinct_requests": distinct,
            "seconds": round(elapsed, 1),
            "turns_per_s": round(turns / elapsed, 1),
            "exemplars_stored": stored,
            "total_cap": settings.exemplars_total,
            "largest_per_tool": max(per_tool.values(), default=0),
            "per_tool_cap": settings.exemplars_per_tool,
            "within_caps": stored <= settings.exemplars_total
            and max(per_tool.values(), default=0) <= settings.exemplars_per_tool,
            "sightings_in_counts": sightings,
        }
    finally:
        await service.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.volume", description=__doc__)
    parser.add_argument("--turns", type=int, default=1_000_000)
    parser.add_argument("--distinct", type=int, default=200_000)
    parser.add_argument("--store", choices=("sqlite", "neo4j"), default="sqlite")
    args = parser.parse_args()
    from toolselect.logs import configure_logging

    configure_logging("warning", "console")
    with tempfile.TemporaryDirectory(prefix="toolselect-volume-") as tmp:
        result = asyncio.run(run(args.store, args.turns, args.distinct, Path(tmp)))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
