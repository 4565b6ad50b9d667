"""The lexical embedder: feature hashing of words and character n-grams (no model, no state).

Feature hashing needs no vocabulary, so every process (every replica, every restart) maps a
text to the same vector: exemplars stored by one replica are valid in all of them.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Sequence
from itertools import chain, pairwise

import mmh3
import numpy as np

from toolselect.embed.base import Vectors, normalise_rows

DEFAULT_DIM = 1 << 11
DEFAULT_WORD_WEIGHT = 0.5
# Up to this many texts are embedded inline on the event loop (a query costs ~0.2 ms);
# larger batches (a catalog) go to a worker thread.
INLINE_LIMIT = 32
# Entries of each memo (feature -> hash, word -> its character n-gram hashes); a full memo is
# cleared, never trimmed: its values never change, so clearing only costs re-hashing.
_CACHE_LIMIT = 1 << 16
# scikit-learn's HashingVectorizer parts, as this embedder configures them
WORD_NGRAMS = (1, 2)
CHAR_NGRAMS = (3, 5)

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


def char_wb_ngrams(word: str, low: int = CHAR_NGRAMS[0], high: int = CHAR_NGRAMS[1]) -> list[str]:
    """scikit-learn's `char_wb` n-grams of one word: padded with a space each side, a word
    shorter than n (or exactly n once padded) counted once."""
    padded = f" {word} "
    size = len(padded)
    out: list[str] = []
    for n in range(low, high + 1):
        offset = 0
        out.append(padded[:n])
        while offset + n < size:
            offset += 1
            out.append(padded[offset : offset + n])
        if offset == 0:
            break
    return out


def word_ngrams(words: Sequence[str]) -> list[str]:
    """scikit-learn's word 1..2-grams: the words, then each adjacent pair joined by a space."""
    return [*words, *(f"{a} {b}" for a, b in pairwise(words))]


class HashingEmbedder:
    """Word unigrams+bigrams and char_wb 3..5-grams, hashed into `dim` buckets each, mixed.

    Each part is L2-normalised, then the parts are added with weights `sqrt(word_weight)` and
    `sqrt(1 - word_weight)` and the sum is normalised again. The vectors are scikit-learn's
    `HashingVectorizer`'s (signed murmurhash3_32 with seed 0, alternate signs, bucket
    `abs(h) % dim`), computed here without it: the n-grams as its analyzers make them, the
    hashes by `mmh3` (the same function), memoised per feature and per word, and the
    buckets by one `bincount` per part. `reference_vectors` runs scikit-learn's own path;
    tests pin the two together. Nothing here imports scikit-learn, so a process that only
    embeds (the exec selector) starts without it.
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
        self._weights = (math.sqrt(word_weight), math.sqrt(1.0 - word_weight))
        # feature -> its bucket code (see `_code`), and word -> the codes of its character
        # n-grams: queries repeat the same words, and one lookup replaces a dozen hashes.
        self._codes: dict[str, int] = {}
        self._word_chars: dict[str, tuple[int, ...]] = {}

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
        for row, text in enumerate(texts):
            words = prepare(text).split()
            if not words:
                continue
            values: dict[int, float] = {}
            word_weight, char_weight = self._weights
            if word_weight:
                self._add(values, self._word_codes(words), word_weight)
            if char_weight:
                self._add(values, self._char_codes(words), char_weight)
            out[row, np.fromiter(values, np.intp, len(values))] = np.fromiter(
                values.values(), np.float64, len(values)
            )
        return normalise_rows(out)

    async def close(self) -> None:
        return None

    def _code(self, feature: str) -> int:
        """Where a feature lands: its bucket `abs(h) % dim`, bit-inverted (`~bucket`, negative)
        when the signed hash `h` is negative, as `FeatureHasher` subtracts it there. Python's
        arbitrary-precision `abs` keeps `abs(-2**31)` exact, which is what scikit-learn's
        special case for that hash amounts to."""
        h = mmh3.hash(feature, 0, signed=True)
        return abs(h) % self._dim if h >= 0 else ~(abs(h) % self._dim)

    def _word_codes(self, words: list[str]) -> list[int]:
        memo = self._codes
        if len(memo) > _CACHE_LIMIT:
            memo.clear()
        out: list[int] = []
        for feature in word_ngrams(words):
            code = memo.get(feature)
            if code is None:
                code = memo[feature] = self._code(feature)
            out.append(code)
        return out

    def _char_codes(self, words: list[str]) -> list[int]:
        memo = self._word_chars
        if len(memo) > _CACHE_LIMIT:
            memo.clear()
        parts: list[tuple[int, ...]] = []
        for word in words:
            codes = memo.get(word)
            if codes is None:
                codes = memo[word] = tuple(self._code(gram) for gram in char_wb_ngrams(word))
            parts.append(codes)
        return list(chain.from_iterable(parts))

    @staticmethod
    def _add(values: dict[int, float], codes: list[int], weight: float) -> None:
        """Add one part to `values` as scikit-learn builds it: signed counts per bucket,
        divided by their L2 norm, times `weight` (in that order, so the floats are equal)."""
        counts: dict[int, int] = {}
        for code in codes:
            if code >= 0:
                counts[code] = counts.get(code, 0) + 1
            else:
                counts[~code] = counts.get(~code, 0) - 1
        squares = sum(c * c for c in counts.values())
        if not squares:
            return
        norm = math.sqrt(squares)
        for bucket, count in counts.items():
            if count:
                values[bucket] = values.get(bucket, 0.0) + count / norm * weight

    def reference_vectors(self, texts: Sequence[str]) -> Vectors:
        """The same vectors through scikit-learn's `HashingVectorizer.transform` (slow; for
        checking: the one place that imports scikit-learn)."""
        from sklearn.feature_extraction.text import HashingVectorizer

        common = {
            "n_features": self._dim,
            "preprocessor": prepare,
            "lowercase": False,
            "norm": "l2",
            "alternate_sign": True,
            "dtype": np.float64,
        }
        vectorizers = (
            HashingVectorizer(
                analyzer="word", ngram_range=WORD_NGRAMS, token_pattern=r"\S+", **common
            ),
            HashingVectorizer(analyzer="char_wb", ngram_range=CHAR_NGRAMS, **common),
        )
        words, chars = (
            vectorizer.transform(list(texts)) * weight
            for vectorizer, weight in zip(vectorizers, self._weights, strict=True)
        )
        return normalise_rows((words + chars).toarray())
