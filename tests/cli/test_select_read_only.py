"""`toolselect select` on a data folder it cannot write: a server's folder mounted read-only in
a container, or another user's files. Real spawns on real SQLite files; the folder is made
read-only with its mode bits, and a test running as root spawns the selector without the
capability that lets root write past them (root ignores mode bits otherwise)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from tests.cli.test_cli import CATALOG, EXE, SELECT, run
from tests.services import cli_env
from toolselect.catalog import parse_tools, tool_text
from toolselect.embed.cache import text_digest

_NO_OVERRIDE = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]


def _reader() -> list[str]:
    """The prefix that spawns a process bound by file modes, as a container's user is."""
    if os.geteuid() != 0:
        return []
    # setpriv is util-linux's, on every Debian machine: without it these tests cannot run as
    # root, which is a failure to fix, not a reason to leave the read-only path untested.
    assert shutil.which("setpriv"), "running as root: setpriv (util-linux) is needed"
    dropped = subprocess.run([*_NO_OVERRIDE, "true"], capture_output=True, text=True)
    assert dropped.returncode == 0, f"setpriv cannot drop CAP_DAC_OVERRIDE: {dropped.stderr}"
    return _NO_OVERRIDE


def select_reading(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_reader(), *EXE, "select"],
        input=json.dumps(SELECT),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """`chmod -R a-w folder` for the block (given back after, so the test can clean up)."""
    paths = [folder, *folder.rglob("*")]
    modes = {p: p.stat().st_mode for p in paths}
    for path in paths:
        path.chmod(modes[path] & ~0o222)
    try:
        yield
    finally:
        for path in paths:
            path.chmod(modes[path])


def files(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def data_env(data: Path) -> dict[str, str]:
    """The store, `vectors.db` and `models/` in one data folder, with MiniLM vectors to keep."""
    return cli_env(
        data / "toolselect.db", TOOLSELECT_DATA_DIR=str(data), TOOLSELECT_EMBEDDER="hybrid"
    )


def _import(env: dict[str, str], tmp_path: Path, catalog: Mapping[str, object]) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(catalog))
    done = run(["tools", "import", str(path)], env)
    assert done.returncode == 0, done.stderr


def test_select_answers_from_a_folder_it_cannot_write(
    data: Path, data_env: dict[str, str], tmp_path: Path
) -> None:
    """A server filled the folder and stopped; the selector, unable to write it, answers as it
    did where it could (it failed: the store could not be opened), from the store and the
    vectors kept there (`vectors.db` read, not written), and writes nothing: no `-wal`, no
    `-shm`, no model graph."""
    _import(data_env, tmp_path, CATALOG)
    writable = run(["select"], data_env, stdin=json.dumps(SELECT))
    assert writable.returncode == 0, writable.stderr
    before = files(data)
    with read_only(data):
        done = select_reading(data_env)
        assert done.returncode == 0, done.stderr
        assert done.stdout == writable.stdout
        assert files(data) == before

    # The vectors come from the file: give the stored get_weather the query's own vector.
    weather = parse_tools(CATALOG)[0][1]
    with closing(sqlite3.connect(data / "vectors.db")) as conn, conn:
        conn.execute(
            "UPDATE vectors SET vector = (SELECT vector FROM vectors WHERE digest = ?) "
            "WHERE digest = ?",
            (text_digest(SELECT["query"]["Text"]), text_digest(tool_text(weather))),
        )
    before = files(data)
    with read_only(data):
        poisoned = select_reading(data_env)
        assert poisoned.returncode == 0, poisoned.stderr
        assert json.loads(poisoned.stdout)["selected"][0] == "get_weather"
        assert files(data) == before


def test_select_reads_what_a_running_server_has_not_checkpointed(
    data: Path, data_env: dict[str, str], tmp_path: Path
) -> None:
    """While a writer has the store open its last commits are in the `-wal` only: a selector
    that cannot write the folder reads them through the writer's `-shm` (reading the main file
    alone would miss the catalog below, and pick send_email)."""
    assert run(["tools", "list"], data_env).returncode == 0  # the store, empty
    store = data / "toolselect.db"
    with closing(sqlite3.connect(store)) as writer:
        writer.execute("SELECT count(*) FROM tools").fetchone()  # holds the WAL open
        emailing = "Send the report to a colleague by email, with attachments."
        _import(data_env, tmp_path, {"tools": [{"name": "get_weather", "description": emailing}]})
        assert Path(f"{store}-wal").stat().st_size > 0
        with read_only(data):
            done = select_reading(data_env)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["selected"][0] == "get_weather"


def test_select_refuses_a_read_only_store_it_would_have_to_upgrade(
    data: Path, data_env: dict[str, str], tmp_path: Path
) -> None:
    """A store at an older schema version cannot be upgraded by a reader: one line, exit 1."""
    _import(data_env, tmp_path, CATALOG)
    with closing(sqlite3.connect(data / "toolselect.db")) as conn:
        conn.execute("PRAGMA user_version = 1")
    with read_only(data):
        done = select_reading(data_env)
    assert done.returncode == 1
    assert "is read-only and at schema version 1" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("missing", [False, True], ids=["empty-folder", "no-folder"])
def test_select_answers_from_a_read_only_folder_without_a_store(
    missing: bool, data: Path, tmp_path: Path
) -> None:
    """A folder it cannot write that holds no store (an empty volume mounted read-only, the
    default folder under a read-only home) is an empty catalog: the selection a writable folder
    without a store gets, from the candidates' descriptions, and nothing written. It exited 1
    (the store could not be created), so the runtime included every tool on every turn."""
    fresh = tmp_path / "fresh"
    writable = run(["select"], cli_env(fresh / "toolselect.db"), stdin=json.dumps(SELECT))
    assert writable.returncode == 0, writable.stderr
    data.mkdir()
    folder = data / "toolselect" if missing else data
    with read_only(data):
        done = select_reading(cli_env(folder / "toolselect.db"))
        assert done.returncode == 0, done.stderr
        assert done.stdout == writable.stdout
        assert files(data) == {}
