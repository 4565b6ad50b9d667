"""`toolselect select` spawned beside other users of its data folder: a writer holding the
store, other spawns at once, a spawn killed mid-write. Real processes on real files."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import neo4j
import numpy as np
import pytest

from tests.cli.test_cli import CATALOG, EXE, SELECT, run
from tests.neo4j_server import NEO4J, Neo4jServer
from tests.services import cli_env, wipe
from toolselect.embed import VectorCache
from toolselect.keys import DEFAULT_TENANT
from toolselect.store.neo4j import cypher


@contextmanager
def holding_the_write_lock(kind: str, env: dict[str, str], db: Path) -> Iterator[None]:
    """A writer in a transaction that holds the store's write lock for the block: SQLite's,
    or on Neo4j the state record's, which every version-moving write takes first."""
    if kind == "sqlite":
        with closing(sqlite3.connect(db, isolation_level=None)) as writer:
            writer.execute("BEGIN IMMEDIATE")
            writer.execute("UPDATE tools SET description = description")
            yield
            writer.execute("ROLLBACK")
        return
    auth = (env["NEO4J_USERNAME"], env["NEO4J_PASSWORD"]) if env["NEO4J_PASSWORD"] else None
    with (
        neo4j.GraphDatabase.driver(env["NEO4J_URI"], auth=auth) as driver,
        driver.session(database=env["NEO4J_DATABASE"]) as session,
        session.begin_transaction() as tx,
    ):
        tx.run(cypher.query("queries/lock_meta"), {"tenant": DEFAULT_TENANT}).consume()
        yield
        tx.rollback()


@pytest.mark.parametrize("kind", ["sqlite", NEO4J])
def test_select_reads_past_a_writer_holding_the_store(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A writer in a transaction (a server saving labels, `tools import`) holds the store's
    write lock; the selector only reads, which the store lets it do meanwhile. Its schema
    check took the write lock on every spawn, so it waited for the writer: on SQLite past the
    5 s busy timeout, then exit 1 ("database is locked"); on Neo4j until the writer was done,
    here past `--timeout`. No selection either way."""
    env = cli_env(tmp_path / "toolselect.db")
    if kind == "neo4j":
        server: Neo4jServer = request.getfixturevalue("neo4j_server")
        asyncio.run(wipe(server))
        env = {**env, "TOOLSELECT_STORE": "neo4j", **server.env()}
    catalog = tmp_path / "tools.json"
    catalog.write_text(json.dumps(CATALOG))
    assert run(["tools", "import", str(catalog)], env).returncode == 0
    first = run(["select"], env, stdin=json.dumps(SELECT))
    assert first.returncode == 0, first.stderr
    with holding_the_write_lock(kind, env, tmp_path / "toolselect.db"):
        started = time.monotonic()
        done = run(["select", "--timeout", "8"], env, stdin=json.dumps(SELECT))
        took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert done.stdout == first.stdout
    assert took < 5  # it never waited for the lock


def _hybrid(data: Path) -> dict[str, str]:
    return cli_env(
        data / "toolselect.db", TOOLSELECT_DATA_DIR=str(data), TOOLSELECT_EMBEDDER="hybrid"
    )


def _spawn(env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [*EXE, "select"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=env,
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(SELECT).encode())
    proc.stdin.close()
    return proc


def _graphs(data: Path) -> list[str]:
    """What `models/` holds: the kept graph, and any folder a spawn began and left."""
    return sorted(p.name for p in (data / "models").iterdir() if p.is_dir())


def test_select_spawns_on_a_fresh_folder_keep_the_model_graph_once(tmp_path: Path) -> None:
    """Spawns started together on a folder without the kept MiniLM graph each wrote one (90 MB
    apiece: 12 at once took 17 s, 11 of them past their 10 s timeout); one writes it now, the
    others open the packaged model and keep nothing."""
    alone = tmp_path / "alone"
    first = _spawn(_hybrid(alone))
    _, status, usage = os.wait4(first.pid, 0)
    assert status == 0
    graph_bytes = usage.ru_oublock * 512
    assert graph_bytes > 50_000_000  # the graph: what one spawn writes

    data = tmp_path / "data"
    procs = [_spawn(_hybrid(data)) for _ in range(4)]
    written = 0
    for proc in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        assert proc.stdout is not None and proc.stderr is not None
        assert status == 0, proc.stderr.read()
        assert json.loads(proc.stdout.read())["selected"]
        written += usage.ru_oublock * 512
    assert written < 1.5 * graph_bytes
    assert len(_graphs(data)) == 1 and not _graphs(data)[0].startswith(".")


def test_select_after_a_spawn_killed_writing_the_graph_leaves_none_of_it(tmp_path: Path) -> None:
    """A spawn killed while it wrote the kept graph (the runtime's timeout, say) left its
    half-written folder in `models/` for good, up to 90 MB a kill; the next spawn that may
    write there removes it."""
    data = tmp_path / "data"
    proc = _spawn(_hybrid(data))
    deadline = time.monotonic() + 60
    while not any(p.stat().st_size for p in data.glob("models/.*/weights.bin")):
        assert proc.poll() is None, "the spawn ended before it wrote the graph"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    assert any(name.startswith(".") for name in _graphs(data))
    done = run(["select"], _hybrid(data), stdin=json.dumps(SELECT))
    assert done.returncode == 0, done.stderr
    assert len(_graphs(data)) == 1 and not _graphs(data)[0].startswith(".")


def test_select_keeps_the_vector_cache_to_the_configured_size(tmp_path: Path) -> None:
    """`vectors.db` is shared with the server, which keeps `TOOLSELECT_VECTOR_CACHE` rows; a
    spawn trimmed it to its own default (50,000) on every write, dropping the server's catalog
    vectors, which its next start then embedded again. 0 keeps no file, as for a service."""
    data = tmp_path / "data"
    data.mkdir()
    rows = 50_100
    server = VectorCache(data / "vectors.db", max_entries=100_000)
    server.put(
        "the-servers-embedder", [f"tool {i}" for i in range(rows)], np.zeros((rows, 4), np.float32)
    )
    server.close()
    env = {**_hybrid(data), "TOOLSELECT_VECTOR_CACHE": "100000"}
    done = run(["select"], env, stdin=json.dumps(SELECT))
    assert done.returncode == 0, done.stderr
    assert VectorCache(data / "vectors.db").count("the-servers-embedder") == rows
    off = tmp_path / "off"
    done = run(
        ["select"], {**_hybrid(off), "TOOLSELECT_VECTOR_CACHE": "0"}, stdin=json.dumps(SELECT)
    )
    assert done.returncode == 0, done.stderr
    assert not (off / "vectors.db").exists()
