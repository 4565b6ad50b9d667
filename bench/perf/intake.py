"""Section `intake`: the learning loop's intake, `service.learning.observe` to turns in each store.

`observe()` is timed per call; throughput is turns recorded per second from the first
`observe()` to a drained queue, unflagged, flagged (labelled by the free tier), and usage
labelled (the agent reports `ok` with the search id of the ranking it was shown: every turn
saves or counts a `usage` label), with the query vector cache on and off.
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.perf.catalog import SEED, as_tools, synth_queries
from bench.perf.stores import store_settings, turn_outcomes, wipe_neo4j
from bench.perf.timing import summarise
from bench.stats import percentile
from toolselect.config import Settings
from toolselect.service import Service


async def _intake(
    store: str,
    workdir: Path,
    catalog: list[dict[str, Any]],
    queries: list[str],
    quick: bool,
    query_cache: int,
) -> dict[str, Any]:
    settings = store_settings(store, workdir, db_name="intake.db", query_cache=query_cache)
    service = await Service.start(settings)
    try:
        await service.catalog.upsert_tools(as_tools(catalog))
        # The free tier's floor as the learner sees it (pinned, or the tuner's calibrated one
        # when `margin_floor` is auto).
        floor = service.tuner.free_floor
        plain: list[tuple[str, str]] = []
        confident: list[str] = []
        searches: list[str] = []
        for q in queries:
            search = await service.ranking.search(q, 5)
            ranking = search.ranking
            plain.append((q, ranking.results[0].tool))
            searches.append(search.search_id)
            if ranking.margin >= floor:
                confident.append(q)

        calls, chunk = (2_000 if quick else 10_000), 500
        call_times: list[float] = []
        for start in range(0, calls, chunk):
            for i in range(start, min(start + chunk, calls)):
                q, tool = plain[i % len(plain)]
                t0 = time.perf_counter()
                queued = service.learning.observe(q, tool, turn_id=f"call-{i}")
                call_times.append(time.perf_counter() - t0)
                assert queued, "the queue must not be full between chunks"
            await service.learner.drain(300)

        Make = Callable[[int], tuple[str, str, dict[str, str]]]
        scenarios: dict[str, tuple[int, Make]] = {
            # used tool = the ranker's top-1, no outcome: recorded, not flagged
            "unflagged": (
                2_000 if quick else 60_000,
                lambda i: (*plain[i % len(plain)], {}),
            ),
            # a fallback tool with a confident ranker: the free tier labels it and an exemplar
            # is saved and folded (a unique suffix, so the ratchet never short-cuts it)
            "flagged_ranker_tier": (
                500 if quick else 8_000,
                lambda i: (f"{confident[i % len(confident)]} ref {i}", "shell_exec", {}),
            ),
            # the runtime's flow at production volume: requests ranked first, the shown top-1
            # used and reported `ok` with the search id; every turn saves a usage label (the
            # first of each request) or counts it again (the repeats)
            "usage_labelled": (
                2_000 if quick else 60_000,
                lambda i: (
                    *plain[i % len(plain)],
                    {"outcome": "ok", "search_id": searches[i % len(searches)]},
                ),
            ),
        }
        out: dict[str, Any] = {
            "store": store,
            "query_cache": query_cache,
            "observe_call": summarise(call_times),
            "confident_queries": len(confident),
            "queries": len(queries),
        }
        for name, (total, make) in scenarios.items():
            cap = settings.queue_size
            # Turns are stamped when observed: those of this scenario are the ones from here on
            # (the previous scenario drained before it).
            since = datetime.now(UTC)
            t0 = time.perf_counter()
            sent = 0
            while sent < total:
                if service.learner.depth < cap:
                    request, used, extra = make(sent)
                    service.learning.observe(request, used, turn_id=f"{name}-{sent}", **extra)
                    sent += 1
                else:
                    await asyncio.sleep(0.001)
            drained = await service.learner.drain(900)
            elapsed = time.perf_counter() - t0
            counts = await turn_outcomes(service.store, since)
            recorded = sum(counts.values())
            out[name] = {
                "turns": total,
                "recorded": recorded,
                "drained": drained,
                "seconds": round(elapsed, 2),
                "turns_per_s": round(recorded / elapsed, 1),
                "tier_result": counts,
                "exemplars_in_ranker": service.ranker.exemplar_total,
            }
            print(
                f"  intake {store:6} cache {query_cache:4} {name:20} {recorded}/{total} turns "
                f"in {elapsed:.1f} s "
                f"= {recorded / elapsed:.0f} turns/s {counts}",
                flush=True,
            )
        return out
    finally:
        await service.close()


ROUNDS = 3


def bench_intake(
    stores: list[str], quick: bool, catalog: list[dict[str, Any]], rounds: int = ROUNDS
) -> list[Any]:
    """Every store and query-cache setting, `rounds` times interleaved; each scenario's
    turns/s is the median of its rounds (a freshly started Neo4j JVM runs its first round at a
    fraction of its warm speed). Each run is long enough to span many intake batches: 60,000
    unflagged and 8,000 flagged turns, a few seconds each here (2,000 flagged turns took well
    under a second on a quiet machine, too short to tell a change from the noise)."""
    queries = synth_queries(catalog, 400, seed=SEED + 3)
    # With the default query cache the requests ranked before they are observed (every one
    # here, as an agent runtime ranks a request before reporting its turn) are not embedded
    # again; with 0 every turn is embedded by the intake worker.
    cases = list(itertools.product(stores, (Settings().query_cache, 0)))
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {case: [] for case in cases}
    for round_ in range(1 if quick else rounds):
        for store, query_cache in cases:
            if store == "neo4j":
                wipe_neo4j()
            with tempfile.TemporaryDirectory(prefix="toolselect-intake-") as tmp:
                result = asyncio.run(
                    _intake(store, Path(tmp), catalog, queries, quick, query_cache)
                )
            print(
                f"  intake {store} round {round_ + 1}: observe() p50 "
                f"{result['observe_call']['p50_ms'] * 1e3:.1f} us, "
                f"p99 {result['observe_call']['p99_ms'] * 1e3:.1f} us",
                flush=True,
            )
            runs[(store, query_cache)].append(result)
    return [_median_of(runs[case]) for case in cases]


def _median_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The first round's record with each scenario's turns/s the median of the rounds (every
    round's figure kept beside it)."""
    out = dict(results[0])
    out["rounds"] = len(results)
    for name in ("unflagged", "flagged_ranker_tier", "usage_labelled"):
        each = [r[name]["turns_per_s"] for r in results]
        out[name] = {**results[0][name], "turns_per_s": percentile(each, 0.5), "rounds": each}
    return out
