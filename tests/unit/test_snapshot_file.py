"""The catalog snapshot's file (`service/snapshot.py`): the conversation signals kept with the
catalog, a file of the previous format loading without them, one of a later format ignored, and
the keeper writing when the signals change as when the ranker does."""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from structlog.testing import capture_logs

from tests.api.conversation import RELATIONS
from toolselect.learn.session_fit import SessionFit, SessionWeights
from toolselect.ranker import LearnedVector
from toolselect.ranker.relations import Relations
from toolselect.records import Tool
from toolselect.service.snapshot import (
    FORMAT,
    CatalogSnapshot,
    SnapshotKeeper,
    read_snapshot,
    write_snapshot,
)

WEATHER = Tool("get_weather", "Current weather and forecast for a city.")
VECTOR = np.array([0.6, 0.8, 0.0], dtype=np.float32)
FIT = SessionFit(
    weights=SessionWeights(prior=0.35, context=0.1, companion_share=0.25),  # margin: inf
    sessions=40,
    turns=200,
    follow_ups=120,
    share_alone=1.1,
    share_fitted=1.25,
    companion_precision=0.5,
    all_alone=None,
    reason="fitted",
    grid={"context=0.1,margin<inf,prior=0.35": 1.25},
    result="fitted",
)


def snapshot(relations: Relations = RELATIONS, fit: SessionFit = FIT) -> CatalogSnapshot:
    learned = (LearnedVector("rain in turin", "get_weather", VECTOR, trusted=True),)
    return CatalogSnapshot("hashing-3", 4, 2, (WEATHER,), learned, relations, fit)


def test_the_conversation_signals_come_back_as_written(tmp_path: Path) -> None:
    """Relations (pairs and transitions) and the session fit, an infinite context gate and
    missing figures included, read back equal to what was written, with the catalog."""
    path = tmp_path / "snap.db"
    write_snapshot(path, snapshot())
    read = read_snapshot(path, "hashing-3")
    assert read is not None
    assert read.relations == RELATIONS and read.relations is not RELATIONS
    assert read.relations.companions(["get_weather"], 2, 0.5)[0].tool == "web_search"
    assert read.relations.prior(["send_email"]) == {"create_calendar_event": 1.0}
    assert read.session_fit == FIT and math.isinf(read.session_fit.weights.context_margin)
    assert read.tools == (WEATHER,) and read.learned[0].tool == "get_weather"


def test_a_file_of_the_previous_format_loads_without_signals(tmp_path: Path) -> None:
    """A snapshot written before the conversation signals were kept (format 0: no
    `user_version`, no session tables) is a snapshot: its catalog, no relations, the default
    fit, and no warning."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    with conn:  # the previous version's schema and rows, as it wrote them
        conn.execute(
            "CREATE TABLE meta (embedder TEXT NOT NULL, catalog_version INTEGER NOT NULL,"
            " exemplar_version INTEGER NOT NULL, dim INTEGER NOT NULL)"
        )
        conn.execute("CREATE TABLE tools (position INTEGER PRIMARY KEY, tool TEXT NOT NULL)")
        conn.execute(
            "CREATE TABLE exemplars (query_norm TEXT PRIMARY KEY, tool TEXT NOT NULL,"
            " label_group TEXT NOT NULL, vector BLOB NOT NULL)"
        )
        conn.execute("INSERT INTO meta VALUES ('hashing-3', 4, 2, 3)")
        conn.execute(
            "INSERT INTO tools VALUES (0, ?)",
            ('{"name": "get_weather", "description": "Current weather and forecast for a'
             ' city.", "input_schema": {}, "packs": []}',),
        )  # fmt: skip
        conn.execute(
            "INSERT INTO exemplars VALUES ('rain in turin', 'get_weather', 'trusted', ?)",
            (VECTOR.tobytes(),),
        )
    conn.close()
    with capture_logs() as logs:
        read = read_snapshot(path, "hashing-3")
    assert logs == []
    assert read is not None
    assert read.tools == (WEATHER,) and len(read.learned) == 1
    assert not read.relations and read.relations.pairs == read.relations.transitions == 0
    assert read.session_fit == SessionFit()


def test_a_file_of_a_later_format_is_no_snapshot(tmp_path: Path) -> None:
    """A file whose format this version does not know is ignored with one warning, as a
    corrupt one is: what it holds may not mean what this version reads it as."""
    path = tmp_path / "later.db"
    write_snapshot(path, snapshot())
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {FORMAT + 1}")
    conn.close()
    with capture_logs() as logs:
        assert read_snapshot(path, "hashing-3") is None
    assert [e["event"] for e in logs] == ["catalog_snapshot_ignored"]
    assert f"format {FORMAT + 1}" in logs[0]["reason"]


async def test_the_keeper_writes_when_the_signals_change(tmp_path: Path) -> None:
    """With the ranker's version unchanged, new relations or a new fit are written; relations
    read again with the same counts, or the same fit, are not."""
    keeper = SnapshotKeeper(tmp_path / "kept.db")
    captured: list[int] = []

    def capture() -> CatalogSnapshot:
        captured.append(1)
        return snapshot()

    try:
        await keeper.keep(7, (RELATIONS, FIT), capture)
        same = Relations(RELATIONS.pair_counts, RELATIONS.transition_counts)
        await keeper.keep(7, (same, replace(FIT)), capture)  # equal copies
        assert len(captured) == 1
        fewer = Relations({("get_weather", "web_search"): 8}, {})
        await keeper.keep(7, (fewer, FIT), capture)
        await keeper.keep(7, (fewer, SessionFit()), capture)
        assert len(captured) == 3
        kept = read_snapshot(tmp_path / "kept.db", "hashing-3")
        assert kept is not None
        assert kept.relations == fewer and kept.session_fit == SessionFit()
    finally:
        keeper.close()


def test_writers_sharing_the_file_never_leave_it_torn(tmp_path: Path) -> None:
    """`serve --workers` runs a service per process on one data folder, each keeping the
    snapshot after its polls: they write the same file at the same moments. Each writer builds
    its own partial file, so none fails ("table meta already exists") or renames another's half
    written one over the snapshot; the file read afterwards is one writer's, whole."""
    path = tmp_path / "snap.db"
    script = (
        "import sys\n"
        "from tests.unit.test_snapshot_file import snapshot\n"
        "from toolselect.service.snapshot import write_snapshot\n"
        "from pathlib import Path\n"
        "for _ in range(40):\n"
        "    write_snapshot(Path(sys.argv[1]), snapshot())\n"
    )
    writers = [
        subprocess.Popen([sys.executable, "-c", script, str(path)], stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    errors = [w.communicate(timeout=120)[1].decode() for w in writers]
    assert [w.returncode for w in writers] == [0, 0, 0], errors
    read = read_snapshot(path, "hashing-3")
    assert read is not None and read.tools == (WEATHER,) and read.session_fit == FIT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap.db"]
