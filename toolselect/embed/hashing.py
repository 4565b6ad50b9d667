"""The default embedder: feature hashing of words and character n-grams (no model, no state).

Feature hashing needs no vocabulary, so every process (every replica, every restart) maps a
text to the same vector: exemplars stored by one replica are valid in all of them.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable, Sequence

import numpy as np
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.utils import murmurhash3_32

from toolselect.embed.base import Vectors, normalise_rows

DEFAULT_DIM = 1 << 11
DEFAULT_WORD_WEIGHT = 0.5
# Up to this many texts are embedded inline on the event loop (a query costs ~0.1 ms);
# larger batches (a catalog) go to a worker thread.
INLINE_LIMIT = 32
_CACHE_LIMIT = 1 << 17

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_TOKEN = re.compile(r"[^\W_]+")
# Function words only: scikit-learn's English list also drops words that name what tools do
# ("find", "call", "show", "system", "amount"), which hurts tool matching.
_STOP_TEXT = """
    a an the and or but if of to in on at by for from with about into over under as is are
    was were be been being am do does did done have has had having it its this that these
    those there here i me my mine we us our you your yours he him his she her they them
    their what which who whom whose when where why how can could would should will shall
    may might must please pls just some any all s t d ll m re ve
"""
_STOP_WORDS = frozenset(_STOP_TEXT.split())


def prepare(text: str) -> str:
    """Lower-case words with names split (snake, camel, dots), punctuation and stop words gone."""
    words = _TOKEN.findall(_CAMEL.sub(" ", text).casefold())
    return " ".join(w for w in words if w not in _STOP_WORDS)


class HashingEmbedder:
    """Word unigrams+bigrams and char_wb 3..5-grams, hashed into `dim` buckets each, mixed.

    Each part is L2-normalised, then the parts are added with weights `sqrt(word_weight)` and
    `sqrt(1 - word_weight)` and the sum is normalised again. The hashing is scikit-learn's
    `HashingVectorizer` (murmurhash3, alternate signs), but `embed_now` buckets the analyzers'
    features itself: sklearn's `transform` costs ~0.6 ms per call before any work, and is no
    faster in bulk. `reference_vectors` runs sklearn's own path; tests pin the two together.
    """

    def __init__(self, dim: int = DEFAULT_DIM, word_weight: float = DEFAULT_WORD_WEIGHT) -> None:
        if dim < 16:
            raise ValueError(f"expected dim >= 16, got {dim}")
        if not 0.0 <= word_weight <= 1.0:
            raise ValueError(f"expected word_weight in 0..1, got {word_weight}")
        self._dim = dim
        self._id = (
            "hashing-v1"
            if (dim, word_weight) == (DEFAULT_DIM, DEFAULT_WORD_WEIGHT)
            else f"hashing-v1-d{dim}-w{word_weight:g}"
        )
        common = {
            "n_features": dim,
            "preprocessor": prepare,
            "lowercase": False,
            "norm": "l2",
            "alternate_sign": True,
            "dtype": np.float64,
        }
        self._vectorizers = (
            HashingVectorizer(analyzer="word", ngram_range=(1, 2), token_pattern=r"\S+", **common),
            HashingVectorizer(analyzer="char_wb", ngram_range=(3, 5), **common),
        )
        self._analyzers: tuple[Callable[[str], list[str]], ...] = tuple(
            v.build_analyzer() for v in self._vectorizers
        )
        self._weights = (math.sqrt(word_weight), math.sqrt(1.0 - word_weight))
        # feature -> signed murmurhash3; queries repeat the same n-grams, and a dict lookup is
        # several times cheaper than hashing again. Cleared when full (values never change).
        self._hashes: dict[str, int] = {}

    @property
    def id(self) -> str:
        return self._id

    @property
    def dim(self) -> int:
        return self._dim

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if len(texts) <= INLINE_LIMIT:
            return self.embed_now(texts)
        return await asyncio.to_thread(self.embed_now, texts)

    def embed_now(self, texts: Sequence[str]) -> Vectors:
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

    async def close(self) -> None:
        return None

    def _bucket(self, features: list[str]) -> np.ndarray:
        """Signed counts per bucket, as `FeatureHasher` computes them (before normalisation)."""
        cache = self._hashes
        if len(cache) > _CACHE_LIMIT:
            cache.clear()
        hashes = np.empty(len(features), dtype=np.int64)
        for i, feature in enumerate(features):
            h = cache.get(feature)
            if h is None:
                h = cache[feature] = murmurhash3_32(feature, seed=0)
            hashes[i] = h
        signs = np.where(hashes >= 0, 1.0, -1.0)
        counts: np.ndarray = np.bincount(np.abs(hashes) % self._dim, signs, minlength=self._dim)
        return counts

    def reference_vectors(self, texts: Sequence[str]) -> Vectors:
        """The same vectors through scikit-learn's `transform` (slow; for checking)."""
        words, chars = (
            vectorizer.transform(list(texts)) * weight
            for vectorizer, weight in zip(self._vectorizers, self._weights, strict=True)
        )
        return normalise_rows((words + chars).toarray())
