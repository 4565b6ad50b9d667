"""`toolselect analytics` as a user runs it on a real embedded store holding awkward names: `$`,
newlines, wide characters and separators, and the mistakes a caller can make on the command line.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.cli.test_cli import run
from tests.services import cli_env
from toolselect.analytics.registry import NAMES
from toolselect.records import Tool, Turn
from toolselect.store.sqlite.store import SqliteStore

NAMES_WITH_DOLLARS = ("a$b", "price $\\frac{1", "y$x^2$")
NEWLINE, WIDE, SEMI = "line\nbreak", "日本語ツール", "semi;colon"
PNG = b"\x89PNG\r\n\x1a\n"


def _turn(n: int, used: str, label: str, request: str = "") -> Turn:
    return Turn(
        id=f"t{n}",
        request=request or f"request {n}",
        used_tool=used,
        at=datetime.now(UTC),
        session_id="s1",
        top1="x",
        margin=0.1,
        flagged=True,
        flag_reason="disagreement",
        tier="teacher",
        label=label,
        result="labeled",
    )


async def _fill(path: Path) -> None:
    """Tools named with `$`, a newline, wide characters and `;`; one session stepping through
    them (tool transitions), and one request labelled `semi;colon` and `x` (a label conflict)."""
    store = SqliteStore(path)
    try:
        await store.migrate()
        names = (*NAMES_WITH_DOLLARS, NEWLINE, WIDE, SEMI, "x")
        await store.upsert_tools([Tool(n, "a tool") for n in names], None)
        dollar, frac, math = NAMES_WITH_DOLLARS
        # `price $\frac{1 / a$b`, the label of the step frac -> dollar, is bad mathtext.
        steps = (dollar, frac, dollar, NEWLINE, WIDE, math)
        turns = [_turn(i, used, steps[(i + 1) % len(steps)]) for i, used in enumerate(steps)]
        turns += [_turn(90, "x", SEMI, "same request"), _turn(91, "x", "x", "same request")]
        await store.record_turns(turns)
    finally:
        await store.close()


@pytest.fixture
def store_env(tmp_path: Path) -> dict[str, str]:
    """The CLI's environment on a store filled by `_fill`, its data folder in `tmp_path`."""
    db = tmp_path / "names.db"
    asyncio.run(_fill(db))
    return cli_env(db, TOOLSELECT_DATA_DIR=str(tmp_path / "data"))


def _refused(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr
    assert done.stdout == ""


def test_plot_draws_names_with_dollars(store_env: dict[str, str], tmp_path: Path) -> None:
    """Tool names holding `$` (valid mathtext or not) plot without error, one analysis or all."""
    png = tmp_path / "transitions.png"
    done = run(["analytics", "tool_transitions", "--plot", str(png)], store_env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert png.read_bytes()[:8] == PNG
    every = run(["analytics", "--plot", str(tmp_path / "charts")], store_env)
    assert every.returncode == 0, every.stderr
    assert sorted(p.name for p in (tmp_path / "charts").iterdir()) == sorted(
        f"{name}.png" for name in NAMES
    )


def test_unknown_analysis_is_a_usage_error(store_env: dict[str, str]) -> None:
    """An unknown analysis name exits 2 with one line naming the known ones, learning too."""
    done = run(["analytics", "nope"], store_env)
    _refused(done, "no analysis named 'nope'; known: misroute_rate,")
    assert done.stderr.rstrip().endswith("tool_transitions, learning")


@pytest.mark.parametrize("name", ["drift", "learning", None])
def test_missing_store_is_refused_and_not_created(tmp_path: Path, name: str | None) -> None:
    """A store file that is not there exits 2 with one line, and neither the file, its
    folders nor the data folder are created."""
    env = cli_env(tmp_path / "typo" / "dir" / "x.db", TOOLSELECT_DATA_DIR=str(tmp_path / "data"))
    done = run(["analytics", *([name] if name else [])], env)
    _refused(done, f"expected an existing SQLite store file, got {tmp_path / 'typo'}")
    assert sorted(tmp_path.iterdir()) == []


def test_plot_into_a_missing_folder_is_refused(store_env: dict[str, str], tmp_path: Path) -> None:
    """`--plot` into a folder that is not there exits 2 and creates nothing; without a name
    the chart folder itself is made, only when its parent exists."""
    before = sorted(tmp_path.iterdir())
    one = run(["analytics", "drift", "--plot", str(tmp_path / "typo" / "dir" / "x.png")], store_env)
    _refused(one, f"cannot write {tmp_path / 'typo' / 'dir' / 'x.png'}: no folder")
    every = run(["analytics", "--plot", str(tmp_path / "typo" / "charts")], store_env)
    _refused(every, f"no folder {tmp_path / 'typo'}")
    assert sorted(tmp_path.iterdir()) == before


def test_learning_refuses_what_it_cannot_honour(store_env: dict[str, str]) -> None:
    """`learning` prints the fit as JSON over every label: `--since`, a table or CSV format and
    `--plot` exit 2 with one line saying so; without `--format` it prints indented JSON."""
    cases = [
        (["--since", "garbage"], "learning takes no --since"),
        (["--since", "2025-01-01"], "learning takes no --since"),
        (["--format", "csv"], "expected --format json or none, got 'csv'"),
        (["--format", "table"], "expected --format json or none, got 'table'"),
        (["--plot", "fit.png"], "learning takes no --plot"),
    ]
    for args, expected in cases:
        _refused(run(["analytics", "learning", *args], store_env), expected)
    fit = run(["analytics", "learning"], store_env)
    assert fit.returncode == 0, fit.stderr
    assert fit.stdout.startswith("{\n") and "fold" in json.loads(fit.stdout)


def test_table_keeps_one_line_per_row(store_env: dict[str, str]) -> None:
    """A tool name holding a newline is shown escaped, so each row of the table is one line."""
    done = run(["analytics", "misroute_rate"], store_env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 + 6  # header, rule, one row per used tool
    assert any(line.startswith("line\\nbreak ") for line in lines)


def test_csv_label_lists_read_back(store_env: dict[str, str]) -> None:
    """A label list in CSV is JSON array text: `semi;colon` and `x` read back as two labels;
    the output is the header and the one row, no blank record after them."""
    done = run(["analytics", "label_conflicts", "--format", "csv"], store_env)
    assert done.returncode == 0, done.stderr
    [header, row] = list(csv.reader(io.StringIO(done.stdout)))
    assert header == ["query", "labels", "tiers", "turns"]
    assert json.loads(row[1]) == [SEMI, "x"]


def test_fallback_tools_setting_names_the_fallback_rows(tmp_path: Path) -> None:
    """The CLI counts a used tool the catalog lacks as the fallback tool of
    `TOOLSELECT_FALLBACK_TOOLS` it is, as the service does: `mcp__bash__run` and `bash__run` are
    one row when `bash__run` is a fallback tool, two rows when it is not."""
    db = tmp_path / "fallbacks.db"

    async def fill() -> None:
        store = SqliteStore(db)
        try:
            await store.migrate()
            await store.upsert_tools([Tool("send_email", "a tool")], None)
            await store.record_turns(
                [_turn(1, "mcp__bash__run", "send_email"), _turn(2, "bash__run", "send_email")]
            )
        finally:
            await store.close()

    asyncio.run(fill())
    rows = {}
    for fallbacks in ("bash__run", "shell_exec"):
        env = cli_env(db, TOOLSELECT_FALLBACK_TOOLS=fallbacks)
        done = run(["analytics", "misroute_rate", "--format", "json"], env)
        assert done.returncode == 0, done.stderr
        rows[fallbacks] = [row[:3] for row in json.loads(done.stdout)["rows"]]
    assert rows == {
        "bash__run": [["bash__run", 2, 2]],
        "shell_exec": [["bash__run", 1, 1], ["mcp__bash__run", 1, 1]],
    }
