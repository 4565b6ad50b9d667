"""Embedders: the `Embedder` port and its adapters (hashing, minilm, http, hybrid)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolselect.embed.base import Embedder, LocalEmbedder, Vectors, normalise_rows
from toolselect.embed.cache import CachedEmbedder, RecentVectors, VectorCache, VectorStore
from toolselect.embed.hashing import HashingEmbedder
from toolselect.embed.hybrid import HybridEmbedder
from toolselect.embed.minilm import MiniLMEmbedder
from toolselect.embed.onnx import OnnxEmbedder, OnnxModel
from toolselect.errors import ConfigError

if TYPE_CHECKING:
    from toolselect.config import Settings
    from toolselect.embed.http import HttpEmbedder

EMBEDDER_KINDS = ("hashing", "minilm", "http", "hybrid")
VECTORS_FILE = "vectors.db"  # in TOOLSELECT_DATA_DIR: the exec selector's and the catalogs'
MODELS_DIR = "models"

__all__ = [
    "EMBEDDER_KINDS",
    "MODELS_DIR",
    "VECTORS_FILE",
    "CachedEmbedder",
    "Embedder",
    "HashingEmbedder",
    "HttpEmbedder",
    "HybridEmbedder",
    "LocalEmbedder",
    "MiniLMEmbedder",
    "OnnxEmbedder",
    "OnnxModel",
    "RecentVectors",
    "VectorCache",
    "VectorStore",
    "Vectors",
    "build_embedder",
    "embedder_for",
    "normalise_rows",
    "vector_cache_path",
]


def __getattr__(name: str) -> Any:
    """`HttpEmbedder` on first use: it imports aiohttp, which processes that embed locally
    (the exec selector) should not pay for."""
    if name == "HttpEmbedder":
        from toolselect.embed.http import HttpEmbedder

        return HttpEmbedder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_embedder(
    kind: str,
    *,
    hybrid_weight: float = 0.5,
    url: str = "",
    model: str = "",
    api_key: str = "",
    threads: int = 1,
    cache: VectorCache | None = None,
    optimized_dir: Path | None = None,
    short_lived: bool = False,
) -> Embedder:
    """The embedder a setting names; `hybrid` is MiniLM (dense) fused with hashing (lexical).

    Nothing is loaded or connected here: MiniLM loads on its first `embed` (with `threads`
    intra-op threads), the HTTP embedder opens its session then. Missing model files raise
    `EmbedderError` now, naming the reinstall command; an unknown kind or an `http` embedder
    without URL or model raises `ConfigError`. With a `cache`, the model's (or endpoint's)
    vectors go through it (`CachedEmbedder`); hashing is never cached, computing it is cheaper
    than reading it. `optimized_dir` keeps MiniLM's optimised graph between processes and
    `short_lived` opens it for a process that embeds little and exits (`OnnxEmbedder`).
    """

    def cached(embedder: Embedder) -> Embedder:
        return embedder if cache is None else CachedEmbedder(embedder, cache)

    if kind == "hashing":
        return HashingEmbedder()
    if kind in ("minilm", "hybrid"):
        minilm = MiniLMEmbedder(
            threads=threads, optimized_dir=optimized_dir, short_lived=short_lived
        )
        minilm.check()
        dense = cached(minilm)
        if kind == "minilm":
            return dense
        if not 0.0 <= hybrid_weight <= 1.0:
            raise ConfigError(f"expected a hybrid weight in 0..1, got {hybrid_weight}")
        return HybridEmbedder(dense, HashingEmbedder(), hybrid_weight)
    if kind == "http":
        if not url or not model:
            raise ConfigError(
                "the http embedder needs an endpoint URL and a model name, "
                f"got url={url!r} model={model!r}"
            )
        from toolselect.embed.http import HttpEmbedder

        return cached(HttpEmbedder(url, model, api_key=api_key))
    raise ConfigError(f"expected an embedder kind in {', '.join(EMBEDDER_KINDS)}, got {kind!r}")


def embedder_for(
    settings: Settings,
    *,
    cache: VectorCache | None = None,
    optimized_dir: Path | None = None,
    short_lived: bool = False,
) -> Embedder:
    """The embedder `settings` configure (`build_embedder` with their values)."""
    return build_embedder(
        settings.embedder_kind,
        hybrid_weight=settings.hybrid_weight,
        url=settings.embed_url,
        model=settings.embed_model,
        api_key=settings.embed_api_key,
        threads=settings.embed_threads,
        cache=cache,
        optimized_dir=optimized_dir,
        short_lived=short_lived,
    )


def vector_cache_path(settings: Settings) -> Path:
    """The file of vectors kept between processes (`VectorCache`) under `TOOLSELECT_DATA_DIR`."""
    return Path(settings.data_dir).expanduser() / VECTORS_FILE
