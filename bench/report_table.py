"""Markdown for the generated pages: table cells, the one table writer, the prose templates
(bench/templates/*.md) and the hand-written parts."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from string import Template
from typing import Any

TEMPLATES = Path(__file__).with_name("templates")
_BLOCK = re.compile(r"^<!-- (\w+) -->\n", re.MULTILINE)


@cache
def _blocks(page: str) -> dict[str, str]:
    parts = _BLOCK.split((TEMPLATES / f"{page}.md").read_text(encoding="utf-8"))
    return {name: text.strip("\n") for name, text in zip(parts[1::2], parts[2::2], strict=True)}


def prose(page: str, block: str, /, **values: object) -> str:
    """Block `block` of bench/templates/PAGE.md with its `$placeholders` filled
    (`string.Template`: a placeholder without a value is an error, a value without one is not)."""
    return Template(_blocks(page)[block]).substitute(values)


def hand_written(path: Path) -> str:
    """A hand-written Markdown file to put in a generated page, without the comment at its top
    that tells its editors how it is used."""
    text = path.read_text(encoding="utf-8").strip()
    if text.startswith("<!--"):
        text = text.split("-->", 1)[1]
    return text.strip()


def pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.1f}"


def ms(x: float | None) -> str:
    if x is None or x != x:
        return ""
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "") -> str:
    """The one Markdown table writer of bench/: `| a | b |` rows, no padding, `---:` under a
    right-aligned column and `---` under the others. `align` has a letter per column (`r`:
    right); unset, the first column is left and the rest right.

    Hand-written because no library writes this text: tabulate's `pipe` format pads every cell
    to its column's width and marks a left column `:---`, its `github` format has no alignment
    markers, and the published pages (and their diffs) are in this compact form."""
    align = (align or "l" + "r" * (len(header) - 1)).ljust(len(header), "l")
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---:" if a == "r" else "---" for a in align) + "|")
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
