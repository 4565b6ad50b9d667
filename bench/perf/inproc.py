"""Section `inproc`: `CentroidRanker.rank` alone and with the query embedding, in process.

At 100 / 1,000 / 10,000 tools, per embedder, with numpy's default BLAS threads and with one
thread (a descheduled BLAS thread is what makes the tail on a shared machine).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_info

from bench.perf.catalog import as_tools, embed_cached, synth_catalog, synth_queries
from bench.perf.timing import blas_threads, summarise, timed
from toolselect.catalog import tool_text
from toolselect.embed import Embedder, OnnxEmbedder, build_embedder
from toolselect.ranker import CentroidRanker


async def _embed_and_rank(
    embedder: Embedder, ranker: CentroidRanker, queries: list[str], iterations: int
) -> list[float]:
    """Per-call time of what `service.ranking.rank` does: embed one query, then rank it."""
    for q in queries[:20]:
        ranker.rank((await embedder.embed([q]))[0], 5)
    out = []
    gc.disable()
    try:
        for i in range(iterations):
            query = queries[i % len(queries)]
            t0 = time.perf_counter()
            vector = (await embedder.embed([query]))[0]
            ranker.rank(vector, 5)
            out.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return out


def _ranking(ranker: CentroidRanker, vectors: np.ndarray) -> Callable[[int], object]:
    return lambda i: ranker.rank(vectors[i % len(vectors)], 5)


def bench_inproc(quick: bool, embedders: list[str]) -> dict[str, Any]:
    """Ranker alone (vector given) and embedding included, per size, embedder and BLAS threads."""
    sizes = (100, 1_000, 10_000)
    catalog = as_tools(synth_catalog(max(sizes)))
    queries = synth_queries(synth_catalog(max(sizes)), 500)
    texts = [tool_text(t) for t in catalog]
    rows: list[dict[str, Any]] = []
    runtime: dict[str, Any] = {}
    for kind in embedders:
        embedder = build_embedder(kind)
        started = time.perf_counter()
        tool_vectors = embed_cached(embedder, texts)
        query_vectors = embed_cached(embedder, queries)
        runtime[kind] = {
            "embedder_id": embedder.id,
            "dim": int(tool_vectors.shape[1]),
            "catalog_embed_or_cache_s": round(time.perf_counter() - started, 2),
        }
        rank_iters = 300 if quick else 2_000
        embed_iters = (30 if quick else 300) if kind != "hashing" else rank_iters
        for n in sizes:
            ranker = CentroidRanker()
            ranker.set_catalog(catalog[:n], tool_vectors[:n])
            for threads in (None, 1):
                with blas_threads(threads):
                    alone = timed(_ranking(ranker, query_vectors), rank_iters)
                    embedded = asyncio.run(_embed_and_rank(embedder, ranker, queries, embed_iters))
                rows.append(
                    {
                        "embedder": kind,
                        "tools": n,
                        "blas_threads": "default" if threads is None else str(threads),
                        "ranker_alone": summarise(alone),
                        "embed_and_rank": summarise(embedded),
                    }
                )
                print(
                    f"  inproc {kind:8} {n:>6} tools threads={rows[-1]['blas_threads']:7} "
                    f"rank p50 {rows[-1]['ranker_alone']['p50_ms']:.3f} ms, "
                    f"embed+rank p50 {rows[-1]['embed_and_rank']['p50_ms']:.3f} ms",
                    flush=True,
                )
        if isinstance(embedder, OnnxEmbedder):
            runtime[kind]["onnx_threads"] = embedder.threads
        asyncio.run(embedder.close())
    runtime["threadpools_after_load"] = [
        {k: info.get(k) for k in ("user_api", "internal_api", "num_threads", "prefix")}
        for info in threadpool_info()
    ]
    return {"rows": rows, "runtime": runtime, "k": 5, "queries": len(queries)}
