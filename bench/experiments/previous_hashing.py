"""The hashing embedder's single-query path before `mmh3` against today's:
`python -m bench.experiments.previous_hashing [--reps N]`.

The previous path hashed every word and character n-gram with scikit-learn's murmurhash,
memoised per feature, then summed them with `bincount` (copied below as it was); today's
(`HashingEmbedder.embed_now`) uses `mmh3` with a per-word memo and sparse sums. Both run one
agent-like query at a time, interleaved query by query after the same warm-up, and the
medians (p50) and p90 in microseconds are printed as JSON. `python -m bench.embed_speed`
publishes today's path against scikit-learn's `HashingVectorizer.transform`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bench.embed_speed import SEED, per_query_us, queries
from toolselect.embed import HashingEmbedder, normalise_rows
from toolselect.embed.hashing import prepare


class PreviousHashing:
    """The inline path as it was before `mmh3` (for the side-by-side figure only)."""

    def __init__(self, dim: int = 1 << 11, word_weight: float = 0.5) -> None:
        from sklearn.feature_extraction.text import HashingVectorizer
        from sklearn.utils import murmurhash3_32

        self._murmur = murmurhash3_32
        self._dim = dim
        common: dict[str, Any] = {
            "n_features": dim,
            "preprocessor": prepare,
            "lowercase": False,
            "norm": "l2",
            "alternate_sign": True,
            "dtype": np.float64,
        }
        self._analyzers = (
            HashingVectorizer(
                analyzer="word", ngram_range=(1, 2), token_pattern=r"\S+", **common
            ).build_analyzer(),
            HashingVectorizer(analyzer="char_wb", ngram_range=(3, 5), **common).build_analyzer(),
        )
        self._weights = (math.sqrt(word_weight), math.sqrt(1.0 - word_weight))
        self._hashes: dict[str, int] = {}

    def embed_now(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float64)
        for row, text in zip(out, texts, strict=True):
            for analyzer, weight in zip(self._analyzers, self._weights, strict=True):
                features = analyzer(text)
                if features and weight:
                    part = self._bucket(features)
                    norm = math.sqrt(float(part @ part))
                    if norm > 0.0:
                        row += (weight / norm) * part
        return normalise_rows(out)

    def _bucket(self, features: list[str]) -> np.ndarray:
        hashes = np.empty(len(features), dtype=np.int64)
        for i, feature in enumerate(features):
            h = self._hashes.get(feature)
            if h is None:
                h = self._hashes[feature] = self._murmur(feature, seed=0)
            hashes[i] = h
        signs = np.where(hashes >= 0, 1.0, -1.0)
        counts: np.ndarray = np.bincount(np.abs(hashes) % self._dim, signs, minlength=self._dim)
        return counts


def compare(reps: int) -> dict[str, Any]:
    """Per-query microseconds of the previous and the current inline path."""
    texts = queries(reps, random.Random(SEED))
    current, previous = HashingEmbedder(), PreviousHashing()
    arms: dict[str, Callable[[str], object]] = {
        "previous_inline": lambda q: previous.embed_now([q]),
        "current_inline": lambda q: current.embed_now([q]),
    }
    return per_query_us(arms, texts)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.previous_hashing")
    parser.add_argument("--reps", type=int, default=3000, help="queries per arm")
    print(json.dumps(compare(parser.parse_args().reps), indent=1))


if __name__ == "__main__":
    main()
