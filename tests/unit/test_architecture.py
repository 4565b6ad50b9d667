"""ARCHITECTURE.md stays true to the code: its oracle policy table is `oracle/tiers.py`'s, and
every rule it places names a file and a function (or class, or method) that exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import toolselect.oracle.tiers

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "ARCHITECTURE.md"


def _section(title: str) -> str:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index(f"\n{title}\n")
    end = re.compile(r"\n#{2,3} ").search(text, start + len(title) + 1)
    return text[start : end.start() if end else len(text)]


def _policy_rows(text: str) -> list[list[str]]:
    """The rows of the first table whose header starts with `why flagged`, cells stripped."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| why flagged"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _defined(path: Path) -> set[str]:
    """Names a module defines: top-level functions, classes and assignments, and methods as
    `Class.method`."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            names.update(
                f"{node.name}.{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            )
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_the_policy_table_is_the_tiers_docstring() -> None:
    """ARCHITECTURE.md's "Oracle policy" table has the rows of `oracle/tiers.py`'s docstring."""
    written = _policy_rows(_section("## Oracle policy"))
    assert written == _policy_rows(toolselect.oracle.tiers.__doc__ or "")
    assert len(written) == 5


def test_every_rule_lives_where_the_table_says() -> None:
    """Each row of "Where each rule lives" names an existing file that defines the function."""
    section = _section("### Where each rule lives")
    rows = re.findall(r"^\| (.+?) \| `([^`]+)` \| `([^`]+)` \|$", section, re.M)
    assert len(rows) >= 15
    for rule, file, name in rows:
        path = ROOT / file
        assert path.is_file(), (rule, file)
        assert name in _defined(path), (rule, file, name)
