"""Weighted fusion of a dense (semantic) and a lexical embedder into one vector space."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import numpy as np

from toolselect.embed.base import Embedder, Vectors


class HybridEmbedder:
    """Concatenates `sqrt(w) * dense` and `sqrt(1 - w) * lexical` (each part unit length).

    The dot product of two hybrid vectors is then exactly `w * cos_dense + (1 - w) *
    cos_lexical`, so the ranker fuses the two scores without knowing it. A row is unit length
    when both parts are; a text without lexical features keeps its dense part only (norm
    `sqrt(w)`), which scores it as if its lexical cosine were 0 rather than inflating the dense
    one.
    """

    def __init__(self, dense: Embedder, lexical: Embedder, weight: float = 0.5) -> None:
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"expected a hybrid weight in 0..1, got {weight}")
        self._dense = dense
        self._lexical = lexical
        self._weight = weight
        self._scales = (np.float32(math.sqrt(weight)), np.float32(math.sqrt(1.0 - weight)))

    @property
    def id(self) -> str:
        return f"hybrid-{self._weight:g}-{self._dense.id}+{self._lexical.id}"

    @property
    def dim(self) -> int:
        dense = self._dense.dim
        return dense + self._lexical.dim if dense else 0

    @property
    def weight(self) -> float:
        return self._weight

    async def embed(self, texts: Sequence[str]) -> Vectors:
        dense, lexical = await asyncio.gather(self._dense.embed(texts), self._lexical.embed(texts))
        out: Vectors = np.hstack((dense * self._scales[0], lexical * self._scales[1])).astype(
            np.float32, copy=False
        )
        return out

    async def close(self) -> None:
        await asyncio.gather(self._dense.close(), self._lexical.close())
