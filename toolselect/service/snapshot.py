"""What a Neo4j-backed service last ranked with, kept on disk for a start in an outage.

A running replica ranks through a store outage from memory; one that starts during it (a
deploy, a crash restart, a replica scaled out) had nothing to rank with and answered every
ranking 503 until the store came back. So the service keeps, beside its spool (one file per
tenant, `tenant_file`), what its ranker holds: the tools as the store returned them, every
exemplar as folded (normalised query, tool, label group, float32 vector: the vector cache's
blob), the embedder id and the store versions they came from; and what its conversation
signals hold (`service/sessions.py`): the relations' counts (`tool_pairs`, `tool_transitions`)
and the session fit (weights and the figures behind them). A start whose store does not
answer within its wait folds that again into an empty ranker and sets the relations and fit
on its session signals, which then rank exactly as the process that wrote it did (companions
and the session prior included; the tuner refits from the same labels); the first load from
the store replaces the catalog, and the first session refresh the relations and fit. The
sessions' last turns are not kept: a ranking reads them from the store, or notes them as
turns are observed.

The file is SQLite like the vector cache, written whole to a temporary file beside it and
renamed over it (`os.replace`: a crash leaves the old file or the new one, never half of
one); its `user_version` is the format, `FORMAT`. A file of format 0 (written before the
conversation signals were kept) loads with no relations and the default fit. A missing file
is no snapshot; a corrupt one, one of a later format or from another embedder neither, with
one warning, never an error. The SQLite store needs none (it is a local file itself):
`snapshot_path` is None there.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import get_args

import numpy as np
import structlog

from toolselect.config import Settings
from toolselect.keys import tenant_file
from toolselect.learn.session_fit import FitResult, SessionFit, SessionWeights
from toolselect.ranker import LearnedVector
from toolselect.ranker.relations import EMPTY_RELATIONS, Counts, Relations
from toolselect.records import Tool

log = structlog.get_logger("toolselect.service")

SNAPSHOT_FILE = "catalog-snapshot.db"  # in TOOLSELECT_DATA_DIR, beside spool.db
# The file's `user_version`: 0 had no conversation signals (its tables are the first three), 1
# adds them. A reader takes every format up to its own.
FORMAT = 1
_SCHEMA = (
    "CREATE TABLE meta (embedder TEXT NOT NULL, catalog_version INTEGER NOT NULL,"
    " exemplar_version INTEGER NOT NULL, dim INTEGER NOT NULL)",
    "CREATE TABLE tools (position INTEGER PRIMARY KEY, tool TEXT NOT NULL)",
    "CREATE TABLE exemplars (query_norm TEXT PRIMARY KEY, tool TEXT NOT NULL,"
    " label_group TEXT NOT NULL, vector BLOB NOT NULL)",
    "CREATE TABLE tool_pairs (a TEXT NOT NULL, b TEXT NOT NULL, n INTEGER NOT NULL)",
    "CREATE TABLE tool_transitions (source TEXT NOT NULL, target TEXT NOT NULL,"
    " n INTEGER NOT NULL)",
    "CREATE TABLE session_fit (fit TEXT NOT NULL)",
)


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    """What the ranker holds, in catalog order, with the store versions it reflects, and the
    conversation signals' relations and fit (none and the default from a format 0 file)."""

    embedder: str
    catalog_version: int
    exemplar_version: int
    tools: tuple[Tool, ...]
    learned: tuple[LearnedVector, ...]
    relations: Relations = field(default_factory=lambda: EMPTY_RELATIONS)  # equal by value
    session_fit: SessionFit = field(default_factory=SessionFit)


class SnapshotKeeper:
    """Writes the index's snapshot to `path` on a thread of its own, off the ranking path.

    Asked once a poll interval by the upkeep (and after a load, and at close), it writes only
    when what the snapshot holds changed since its last write (the ranker's version, the
    relations, the session fit): a catalog or labels written many times a second cost one
    write a poll interval, a session refresh that read the same counts and fit none, and a
    start from it misses at most what a replica one poll behind would. A write that fails (disk
    full, read-only folder) is logged and tried again at the next change; it never stops the
    upkeep."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._io = ThreadPoolExecutor(1, thread_name_prefix="toolselect-snapshot")
        self._written: tuple[int, Relations, SessionFit] | None = None  # what the last write held
        self._failing: str | None = None

    async def keep(
        self,
        version: int,
        signals: tuple[Relations, SessionFit],
        capture: Callable[[], CatalogSnapshot],
    ) -> None:
        """Write `capture()` with the conversation `signals` (relations, session fit) unless
        ranker `version` and the `signals` (compared by value) are those already written."""
        held = (version, *signals)
        if held == self._written:
            self._written = held  # an equal copy: the next comparison is one of identity
            return
        relations, fit = signals
        snap = replace(capture(), relations=relations, session_fit=fit)
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._io, write_snapshot, self.path, snap)
        except (OSError, sqlite3.Error) as exc:
            if str(exc) != self._failing:
                log.warning("catalog_snapshot_not_written", path=str(self.path), error=str(exc))
            self._failing = str(exc)
            return
        self._written, self._failing = held, None

    async def load(self, embedder: str) -> CatalogSnapshot | None:
        """The kept snapshot made with `embedder`, if any (`read_snapshot`)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._io, read_snapshot, self.path, embedder)

    def close(self) -> None:
        self._io.shutdown(wait=True)


def snapshot_path(settings: Settings, tenant: str) -> Path | None:
    """Where `tenant`'s snapshot is kept: only for Neo4j, and only with a data folder."""
    if settings.store_kind != "neo4j" or not settings.data_dir:
        return None
    return tenant_file(Path(settings.data_dir).expanduser() / SNAPSHOT_FILE, tenant)


def write_snapshot(path: Path, snap: CatalogSnapshot) -> None:
    """Replace the file at `path` with `snap`, atomically (blocking: call on a worker thread).

    The partial file is this writer's own: `serve --workers` processes keep the one file of
    their data folder, often at the same moment, and a shared partial name let one writer's
    rename move another's half-written file over the snapshot."""
    handle, name = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".partial", dir=path.parent)
    os.close(handle)
    partial = Path(name)
    dim = snap.learned[0].vector.shape[0] if snap.learned else 0
    try:
        _write(partial, snap, dim)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)  # a failed write leaves no partial file behind


def _write(partial: Path, snap: CatalogSnapshot, dim: int) -> None:
    conn = sqlite3.connect(partial)
    try:
        with conn:
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO meta VALUES (?, ?, ?, ?)",
                (snap.embedder, snap.catalog_version, snap.exemplar_version, dim),
            )
            conn.executemany(
                "INSERT INTO tools VALUES (?, ?)",
                ((i, _tool_json(t)) for i, t in enumerate(snap.tools)),
            )
            conn.executemany(
                "INSERT INTO exemplars VALUES (?, ?, ?, ?)",
                (
                    (lv.query_norm, lv.tool, lv.group, np.asarray(lv.vector, np.float32).tobytes())
                    for lv in snap.learned
                ),
            )
            relations = snap.relations
            conn.executemany(
                "INSERT INTO tool_pairs VALUES (?, ?, ?)", _rows(relations.pair_counts)
            )
            conn.executemany(
                "INSERT INTO tool_transitions VALUES (?, ?, ?)", _rows(relations.transition_counts)
            )
            conn.execute("INSERT INTO session_fit VALUES (?)", (_fit_json(snap.session_fit),))
            conn.execute(f"PRAGMA user_version = {FORMAT}")
    finally:
        conn.close()


def read_snapshot(path: Path, embedder: str) -> CatalogSnapshot | None:
    """The snapshot at `path` if there is one made with `embedder`; None (with one warning)
    for a corrupt file, one of a later format or another embedder's."""
    if not path.exists():
        return None
    try:
        snap = _read(path)
    except (sqlite3.Error, ValueError, TypeError, KeyError) as exc:
        log.warning("catalog_snapshot_ignored", path=str(path), reason=f"unreadable: {exc}")
        return None
    if snap.embedder != embedder:
        log.warning(
            "catalog_snapshot_ignored",
            path=str(path),
            reason=f"made with embedder {snap.embedder!r}, not {embedder!r}",
        )
        return None
    return snap


def _read(path: Path) -> CatalogSnapshot:
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        (form,) = conn.execute("PRAGMA user_version").fetchone()
        if not 0 <= form <= FORMAT:
            raise ValueError(f"format {form}, expected 0..{FORMAT}")
        meta = conn.execute("SELECT embedder, catalog_version, exemplar_version, dim FROM meta")
        embedder, catalog_version, exemplar_version, dim = meta.fetchone()
        tools = tuple(
            _tool_of(text) for (text,) in conn.execute("SELECT tool FROM tools ORDER BY position")
        )
        rows = conn.execute("SELECT query_norm, tool, label_group, vector FROM exemplars")
        learned = tuple(_learned(row, int(dim)) for row in rows)
        relations, fit = _sessions(conn) if form >= 1 else (EMPTY_RELATIONS, SessionFit())
    finally:
        conn.close()
    return CatalogSnapshot(
        str(embedder), int(catalog_version), int(exemplar_version), tools, learned, relations, fit
    )


def _sessions(conn: sqlite3.Connection) -> tuple[Relations, SessionFit]:
    """The conversation signals of a format 1 file."""
    pairs = _counts(conn.execute("SELECT a, b, n FROM tool_pairs"))
    steps = _counts(conn.execute("SELECT source, target, n FROM tool_transitions"))
    (fit,) = conn.execute("SELECT fit FROM session_fit").fetchall()  # one row, or unreadable
    return Relations(pairs, steps), _fit_of(fit[0])


def _rows(counts: Counts) -> list[tuple[str, str, int]]:
    return [(a, b, n) for (a, b), n in counts.items()]


def _counts(rows: sqlite3.Cursor) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for a, b, n in rows:
        if not (isinstance(a, str) and isinstance(b, str) and isinstance(n, int)):
            raise ValueError(f"relation row {(a, b, n)!r} does not fit the snapshot")
        out[(a, b)] = n
    return out


def _fit_json(fit: SessionFit) -> str:
    # Python's own JSON, read only by `_fit_of`: an ungated context's margin is `Infinity`.
    return json.dumps(asdict(fit))


def _fit_of(text: str) -> SessionFit:
    """The fit `_fit_json` wrote; `ValueError`, `TypeError` or `KeyError` for anything else."""
    data = json.loads(text)
    w = data["weights"]
    if data["result"] not in get_args(FitResult):
        raise ValueError(f"session fit result {data['result']!r} is not one of this version's")
    return SessionFit(
        weights=SessionWeights(
            prior=float(w["prior"]),
            context=float(w["context"]),
            companion_share=_measure(w["companion_share"]),
            context_margin=float(w["context_margin"]),
        ),
        sessions=int(data["sessions"]),
        turns=int(data["turns"]),
        follow_ups=int(data["follow_ups"]),
        share_alone=_measure(data["share_alone"]),
        share_fitted=_measure(data["share_fitted"]),
        companion_precision=_measure(data["companion_precision"]),
        next_precision=_measure(data["next_precision"]),
        all_alone=_measure(data["all_alone"]),
        all_with_companions=_measure(data["all_with_companions"]),
        reason=str(data["reason"]),
        grid={str(k): float(v) for k, v in dict(data["grid"]).items()},
        result=data["result"],
    )


def _measure(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number or null, got {value!r}")
    return float(value)


def _learned(row: Sequence[object], dim: int) -> LearnedVector:
    query_norm, tool, group, blob = row
    if not isinstance(blob, bytes) or len(blob) != 4 * dim or group not in _GROUPS:
        raise ValueError(f"exemplar row of {query_norm!r} does not fit the snapshot")
    vector = np.frombuffer(blob, dtype=np.float32)
    return LearnedVector(
        str(query_norm), str(tool), vector, trusted=group == "trusted", usage=group == "usage"
    )


_GROUPS = ("trusted", "usage", "own")


def _tool_json(tool: Tool) -> str:
    return json.dumps(
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": tool.input_schema,
            "packs": list(tool.packs),
        }
    )


def _tool_of(text: str) -> Tool:
    data = json.loads(text)
    return Tool(
        name=str(data["name"]),
        description=str(data["description"]),
        input_schema=dict(data["input_schema"]),
        packs=tuple(str(p) for p in data["packs"]),
    )
