"""Vectors kept on disk between processes, keyed by embedder id and the text's SHA-256.

The exec selector (`toolselect select`) is a new process for every agent turn, with mostly the
same ~20 candidate tools each time: computing their dense vectors again on every spawn costs a
model load and a forward pass per text. `VectorCache` is one SQLite file (a row per
`(embedder id, sha256(text))`, the float32 bytes as a blob) shared by concurrent processes;
`CachedEmbedder` puts it in front of any embedder, so an embedder whose every text is cached
is never loaded. A service's index embeds tools and labels through one too
(`TOOLSELECT_VECTOR_CACHE`, `offload`: the file is read and written on worker threads, off the
event loop), so a restart, another worker or a tenant started again reads its catalog's vectors
instead of running the model.

The cache only ever saves work: a file that cannot be opened or read (another process holding
the lock too long, a corrupt file) is a miss, never an error, one that cannot be written
(read-only folder, another user's file) is read and kept as it is, and an entry of the wrong
width is ignored. Rows past `max_entries` are dropped oldest first.

`RecentVectors` is the in-memory kind, for a long-running service: an agent runtime ranks a
request and reports the same request as a turn a few seconds later, so the learner finds the
vector `/v1/rank` computed instead of running the model again (and a repeated query skips it).
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from toolselect.embed.base import Embedder, Vectors
from toolselect.sqlite_wal import cannot_write, open_read_only, use_wal

DEFAULT_MAX_ENTRIES = 50_000
T = TypeVar("T")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    embedder TEXT NOT NULL,
    digest BLOB NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (embedder, digest)
)
"""


def text_digest(text: str) -> bytes:
    """SHA-256 of the text's UTF-8 (lone surrogates kept as such, so any str has one)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class VectorStore(Protocol):
    """Where `CachedEmbedder` keeps vectors: a lookup that may miss, and a write that may not
    keep what it was given (neither ever raises)."""

    def get(self, embedder: str, texts: Sequence[str], dim: int) -> list[Vectors | None]: ...

    def put(self, embedder: str, texts: Sequence[str], vectors: Vectors) -> None: ...

    def close(self) -> None: ...


class VectorCache:
    """A SQLite file of float32 vectors; opened on first use (construction does no I/O).

    `hits`, `misses` and `writes` count this instance's lookups and stored rows. A file this
    process cannot write is only read (`read_only`, known once the file is opened): `put`
    keeps nothing.
    """

    def __init__(
        self, path: Path, *, max_entries: int = DEFAULT_MAX_ENTRIES, busy_timeout: float = 0.5
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"expected max_entries >= 1, got {max_entries}")
        self._path = Path(path)
        self._max_entries = max_entries
        self._busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._broken = False
        # One connection, used from whichever thread asks (a service reads on worker threads):
        # the lock serialises it.
        self._lock = threading.RLock()
        self.hits = 0
        self.misses = 0
        self.writes = 0
        self.read_only = False

    @property
    def path(self) -> Path:
        return self._path

    def get(self, embedder: str, texts: Sequence[str], dim: int) -> list[Vectors | None]:
        """Each text's cached vector (float32, length `dim`), or None where there is none."""
        with self._lock:
            return self._get(embedder, texts, dim)

    def _get(self, embedder: str, texts: Sequence[str], dim: int) -> list[Vectors | None]:
        found: dict[bytes, bytes] = {}
        digests = [text_digest(t) for t in texts]
        conn = self._connect()
        if conn is not None and digests:
            marks = ",".join("?" * len(digests))
            # Only placeholders are formatted in; the values are bound.
            query = f"SELECT digest, vector FROM vectors WHERE embedder = ? AND digest IN ({marks})"  # noqa: S608
            try:
                rows = conn.execute(query, (embedder, *digests)).fetchall()
            except sqlite3.Error:
                rows = []
            found = {bytes(d): bytes(v) for d, v in rows}
        out: list[Vectors | None] = []
        for digest in digests:
            blob = found.get(digest)
            if blob is not None and len(blob) == 4 * dim:
                out.append(np.frombuffer(blob, dtype=np.float32))
                self.hits += 1
            else:
                out.append(None)
                self.misses += 1
        return out

    def put(self, embedder: str, texts: Sequence[str], vectors: Vectors) -> None:
        """Store vectors (rows in text order); rows already there are kept as they are."""
        with self._lock:
            self._put(embedder, texts, vectors)

    def _put(self, embedder: str, texts: Sequence[str], vectors: Vectors) -> None:
        conn = self._connect()
        if conn is None or self.read_only or not texts:
            return
        rows = [
            (embedder, text_digest(t), np.ascontiguousarray(v, dtype=np.float32).tobytes())
            for t, v in zip(texts, vectors, strict=True)
        ]
        try:
            with conn:
                before = conn.total_changes
                conn.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?)", rows)
                self.writes += conn.total_changes - before
                conn.execute(
                    "DELETE FROM vectors WHERE rowid <= (SELECT max(rowid) FROM vectors) - ?",
                    (self._max_entries,),
                )
        except sqlite3.Error:
            return

    def count(self, embedder: str | None = None) -> int:
        """Rows stored (for one embedder id when given); 0 when the file cannot be read."""
        with self._lock:
            return self._count(embedder)

    def _count(self, embedder: str | None) -> int:
        conn = self._connect()
        if conn is None:
            return 0
        try:
            if embedder is None:
                row = conn.execute("SELECT count(*) FROM vectors").fetchone()
            else:
                row = conn.execute(
                    "SELECT count(*) FROM vectors WHERE embedder = ?", (embedder,)
                ).fetchone()
        except sqlite3.Error:
            return 0
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connect(self) -> sqlite3.Connection | None:
        if self._conn is not None or self._broken:
            return self._conn
        if cannot_write(self._path):
            # Still worth reading (a folder mounted read-only, another user's): it holds the
            # vectors of every text seen where it was written. What is embedded here is not kept.
            try:
                self._conn = open_read_only(
                    self._path, timeout=self._busy_timeout, check_same_thread=False
                )
            except sqlite3.Error:
                self._broken = True
            self.read_only = self._conn is not None
            return self._conn
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self._path, timeout=self._busy_timeout, check_same_thread=False)
        except (OSError, sqlite3.Error):
            self._broken = True
            return None
        try:
            use_wal(conn, self._busy_timeout)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
        except sqlite3.Error:
            conn.close()
            self._broken = True
            return None
        self._conn = conn
        return conn


class RecentVectors:
    """The last `capacity` texts' vectors in memory, least recently used dropped first.

    Keyed by the text itself within one embedder id (a service has one); safe from the event
    loop and worker threads alike. `hits` and `misses` count lookups, and `on_lookup(hits,
    misses)` hears of each (a metric).
    """

    def __init__(
        self, capacity: int, *, on_lookup: Callable[[int, int], None] | None = None
    ) -> None:
        if capacity < 1:
            raise ValueError(f"expected capacity >= 1, got {capacity}")
        self.capacity = capacity
        self._on_lookup = on_lookup
        self._vectors: OrderedDict[tuple[str, str], Vectors] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._vectors)

    def get(self, embedder: str, texts: Sequence[str], dim: int) -> list[Vectors | None]:
        out: list[Vectors | None] = []
        with self._lock:
            for text in texts:
                vector = self._vectors.get((embedder, text))
                if vector is not None and vector.shape[0] == dim:
                    self._vectors.move_to_end((embedder, text))
                    out.append(vector)
                else:
                    out.append(None)
        hits = sum(v is not None for v in out)
        self.hits += hits
        self.misses += len(out) - hits
        if self._on_lookup is not None:
            self._on_lookup(hits, len(out) - hits)
        return out

    def put(self, embedder: str, texts: Sequence[str], vectors: Vectors) -> None:
        with self._lock:
            for text, vector in zip(texts, vectors, strict=True):
                # A copy: a row view would keep its whole batch's matrix alive.
                self._vectors[(embedder, text)] = np.array(vector, dtype=np.float32)
                self._vectors.move_to_end((embedder, text))
            while len(self._vectors) > self.capacity:
                self._vectors.popitem(last=False)

    def close(self) -> None:
        with self._lock:
            self._vectors.clear()


class CachedEmbedder:
    """`inner` with its vectors kept in a `VectorStore`: only uncached texts reach `inner`.

    Same `id` and `dim` as `inner` (the vectors are `inner`'s, bit for bit), so exemplars it
    embeds are stored as `inner`'s. `inner` is only asked, and so only loaded, on a miss. With
    `keep_misses=False` it only reads the cache: what it embeds is not worth an entry, and
    would push out entries that are.
    """

    def __init__(
        self,
        inner: Embedder,
        cache: VectorStore,
        *,
        keep_misses: bool = True,
        offload: bool = False,
        on_lookup: Callable[[int, int], None] | None = None,
    ) -> None:
        self._inner = inner
        self._cache = cache
        self._keep_misses = keep_misses
        self._offload = offload
        self._on_lookup = on_lookup

    @property
    def id(self) -> str:
        return self._inner.id

    @property
    def dim(self) -> int:
        return self._inner.dim

    @property
    def inner(self) -> Embedder:
        return self._inner

    @property
    def cache(self) -> VectorStore:
        return self._cache

    async def embed(self, texts: Sequence[str]) -> Vectors:
        dim = self._inner.dim
        if not texts:
            return np.zeros((0, dim), dtype=np.float32)
        cached: list[Vectors | None] = [None] * len(texts)
        if dim:
            cached = await self._call(self._cache.get, self.id, texts, dim)
        missing = [i for i, v in enumerate(cached) if v is None]
        if self._on_lookup is not None:
            self._on_lookup(len(texts) - len(missing), len(missing))
        fresh: Vectors | None = None
        if missing:
            fresh = await self._inner.embed([texts[i] for i in missing])
            if self._keep_misses:
                await self._call(self._cache.put, self.id, [texts[i] for i in missing], fresh)
        out = np.empty((len(texts), fresh.shape[1] if fresh is not None else dim), np.float32)
        for i, vector in enumerate(cached):
            if vector is not None:
                out[i] = vector
        if fresh is not None:
            out[missing] = fresh
        return out

    async def _call(self, method: Callable[..., T], *args: Any) -> T:
        """`method(*args)` on a worker thread with `offload` (a file on a service's event loop
        would stall every request meanwhile), else here (a short-lived process has no other
        work)."""
        if self._offload:
            return await asyncio.to_thread(method, *args)
        return method(*args)

    async def close(self) -> None:
        try:
            await self._inner.close()
        finally:
            self._cache.close()
