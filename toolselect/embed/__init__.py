"""Embedders: the `Embedder` port and its adapters (hashing, minilm, http, hybrid)."""

from __future__ import annotations

from toolselect.embed.base import Embedder, LocalEmbedder, Vectors, normalise_rows
from toolselect.embed.hashing import HashingEmbedder
from toolselect.embed.http import HttpEmbedder
from toolselect.embed.hybrid import HybridEmbedder
from toolselect.embed.minilm import MiniLMEmbedder, check_available
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
    "Vectors",
    "build_embedder",
    "normalise_rows",
]


def build_embedder(
    kind: str, *, hybrid_weight: float = 0.5, url: str = "", model: str = "", api_key: str = ""
) -> Embedder:
    """The embedder a setting names; `hybrid` is MiniLM (dense) fused with hashing (lexical).

    Nothing is loaded or connected here: MiniLM loads on its first `embed`, the HTTP embedder
    opens its session then. A missing `minilm` extra raises `EmbedderError` now, naming the
    install command; an unknown kind or an `http` embedder without URL or model raises
    `ConfigError`.
    """
    if kind == "hashing":
        return HashingEmbedder()
    if kind == "minilm":
        check_available()
        return MiniLMEmbedder()
    if kind == "hybrid":
        check_available()
        if not 0.0 <= hybrid_weight <= 1.0:
            raise ConfigError(f"expected a hybrid weight in 0..1, got {hybrid_weight}")
        return HybridEmbedder(MiniLMEmbedder(), HashingEmbedder(), hybrid_weight)
    if kind == "http":
        if not url or not model:
            raise ConfigError(
                "the http embedder needs an endpoint URL and a model name, "
                f"got url={url!r} model={model!r}"
            )
        return HttpEmbedder(url, model, api_key=api_key)
    raise ConfigError(f"expected an embedder kind in {', '.join(EMBEDDER_KINDS)}, got {kind!r}")
