"""`toolselect analytics` as a user runs it on a real embedded store holding awkward names: `$`,
newlines, wide characters and separators."""

from __future__ import annotations

import asyncio
import csv
import io
import json
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
