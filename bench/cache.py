"""Embed each text once: an in-memory cache per embedder id, persisted in bench/out/cache/.

`CachedEmbedder` wraps a real embedder and keeps its id and dim, so what it returns is exactly
what the wrapped embedder returned for that text the first time (batch-encoded; the ONNX MiniLM gives
the same vector to within ~1e-6 whatever the batch). It is used where the same texts are
embedded again and again across arms (the catalog, the learn half); latency is always measured
on the real, uncached embedder.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench import OUT
from toolselect.embed import Embedder, HashingEmbedder, HybridEmbedder, MiniLMEmbedder, Vectors

CACHE_DIR = OUT / "cache"


def _key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


class VectorCache:
    """text -> vector for one embedder id; `save` writes an .npz when something was added."""

    def __init__(self, embedder_id: str, persist: bool = True) -> None:
        self.embedder_id = embedder_id
        self.path: Path | None = CACHE_DIR / f"{embedder_id}.npz" if persist else None
        self.vectors: dict[str, np.ndarray] = {}
        self.dirty = False
        if self.path is not None and self.path.is_file():
            with np.load(self.path) as data:
                keys, matrix = data["keys"], data["vectors"]
                self.vectors = {str(k): matrix[i] for i, k in enumerate(keys)}

    def save(self) -> None:
        if self.path is None or not self.dirty or not self.vectors:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self.vectors))
        matrix = np.vstack(list(self.vectors.values())).astype(np.float32)
        np.savez(self.path, keys=keys, vectors=matrix)
        self.dirty = False


class CachedEmbedder:
    """An `Embedder` answering from the cache, embedding only the texts it has not seen."""

    def __init__(self, inner: Embedder, cache: VectorCache | None = None) -> None:
        self.inner = inner
        self.cache = cache or VectorCache(inner.id)
        if self.cache.embedder_id != inner.id:
            raise ValueError(f"cache of {self.cache.embedder_id} used for {inner.id}")
        self.misses = 0

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def dim(self) -> int:
        return self.inner.dim

    async def embed(self, texts: Sequence[str]) -> Vectors:
        keys = [_key(t) for t in texts]
        store = self.cache.vectors
        missing = list(dict.fromkeys(k for k in keys if k not in store))
        if missing:
            by_key = dict(zip(keys, texts, strict=True))
            fresh = await self.inner.embed([by_key[k] for k in missing])
            for k, vector in zip(missing, fresh, strict=True):
                store[k] = np.asarray(vector, dtype=np.float32)
            self.misses += len(missing)
            self.cache.dirty = True
        if not keys:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.vstack([store[k] for k in keys]).astype(np.float32, copy=False)

    async def close(self) -> None:
        self.cache.save()


class Encoders:
    """The embedders of the benchmark, sharing one MiniLM model and one vector cache.

    `get(kind, weight)` gives the same embedder as `build_embedder(kind, hybrid_weight=weight)`
    (the same classes, the same id) except that the MiniLM part answers from the cache.
    """

    def __init__(self) -> None:
        self._minilm: CachedEmbedder | None = None
        # Hashing is cheap but the sweeps embed the same catalog dozens of times: memory only.
        hashing = HashingEmbedder()
        self.hashing = CachedEmbedder(hashing, VectorCache(hashing.id, persist=False))

    @property
    def minilm(self) -> CachedEmbedder:
        if self._minilm is None:
            self._minilm = CachedEmbedder(MiniLMEmbedder())
        return self._minilm

    def get(self, kind: str, weight: float = 0.5) -> Embedder:
        if kind == "hashing":
            return self.hashing
        if kind == "minilm":
            return self.minilm
        if kind == "hybrid":
            return HybridEmbedder(self.minilm, self.hashing, weight)
        raise ValueError(f"expected hashing, minilm or hybrid, got {kind!r}")

    def save(self) -> None:
        if self._minilm is not None:
            self._minilm.cache.save()
