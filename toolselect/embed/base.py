"""The Embedder port: texts in, unit-length float32 rows out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors whose dot product is their cosine similarity.

    `id` names the model and its settings (`hashing-v1`, `minilm-all-MiniLM-L6-v2`,
    `http-<model>`, `hybrid-<w>-<dense id>+<lexical id>`). It is stored with every exemplar:
    vectors of two different ids are not comparable, so any change that moves vectors must
    change the id.

    `embed` returns float32 of shape `(len(texts), dim)`, every row L2-normalised. A text with
    no features (empty, punctuation only) may give an all-zero row, never NaN. Remote
    embedders raise `EmbedderUnavailable` when they cannot be reached and `EmbedderError` for
    unusable answers. `close` releases what the embedder opened itself.
    """

    @property
    def id(self) -> str: ...

    @property
    def dim(self) -> int:
        """Vector length; 0 while a remote embedder has not answered yet."""
        ...

    async def embed(self, texts: Sequence[str]) -> Vectors: ...

    async def close(self) -> None: ...


@runtime_checkable
class LocalEmbedder(Embedder, Protocol):
    """An embedder cheap enough to call inline on the request path (no I/O, no model load)."""

    def embed_now(self, texts: Sequence[str]) -> Vectors:
        """The same vectors as `embed`, computed synchronously in the caller's thread."""
        ...


def normalise_rows(matrix: npt.NDArray[np.floating]) -> Vectors:
    """Scale each row to unit length; all-zero rows stay zero (no division by zero, no NaN)."""
    out = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.maximum(norms, np.float32(1e-12), out=norms)
    result: Vectors = (out / norms).astype(np.float32, copy=False)
    return result
