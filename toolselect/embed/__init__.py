"""Embedders: the `Embedder` port and its adapters (hashing, minilm, http, hybrid)."""

from __future__ import annotations

from toolselect.embed.base import Embedder, LocalEmbedder, Vectors, normalise_rows
from toolselect.embed.hashing import HashingEmbedder
from toolselect.embed.http import HttpEmbedder
from toolselect.embed.hybrid import HybridEmbedder
from toolselect.embed.minilm import MiniLMEmbedder
from toolselect.embed.onnx import OnnxEmbedder, OnnxModel
from toolselect.errors import ConfigError

EMBEDDER_KINDS = ("hashing", "minilm", "http", "hybrid")

__all__ = [
    "EMBEDDER_KINDS",
    "Embedder",
    "HashingEmbedder",
    "HttpEmbedder",
    "HybridEmbedder",
    "LocalEmbedder",
    "MiniLMEmbedder",
    "OnnxEmbedder",
    "OnnxModel",
    "Vectors",
    "build_embedder",
    "normalise_rows",
]


def build_embedder(
    kind: str,
    *,
    hybrid_weight: float = 0.5,
    url: str = "",
    model: str = "",
    api_key: str = "",
    threads: int = 1,
) -> Embedder:
    """The embedder a setting names; `hybrid` is MiniLM (dense) fused with hashing (lexical).

    Nothing is loaded or connected here: MiniLM loads on its first `embed` (with `threads`
    intra-op threads), the HTTP embedder opens its session then. Missing model files raise
    `EmbedderError` now, naming the reinstall command; an unknown kind or an `http` embedder
    without URL or model raises `ConfigError`.
    """
    if kind == "hashing":
        return HashingEmbedder()
    if kind in ("minilm", "hybrid"):
        dense = MiniLMEmbedder(threads=threads)
        dense.check()
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
        return HttpEmbedder(url, model, api_key=api_key)
    raise ConfigError(f"expected an embedder kind in {', '.join(EMBEDDER_KINDS)}, got {kind!r}")
