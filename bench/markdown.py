"""Markdown for the generated pages: the Jinja2 templates in bench/templates/, the filters that
format their figures, and the hand-written parts.

A template page holds one block per `<!-- name -->` line, up to the next (a `macros` block is
shared by the page's others). Python hands a block the results (the JSON as loaded, and the few
values it derives) and the block writes the prose and the tables as the page shows them, so a
column or a sentence is edited there, not here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).with_name("templates")
_BLOCK = re.compile(r"^<!-- (\w+) -->\n", re.MULTILINE)


def pct(x: float | None) -> str:
    """A share as a percentage with one decimal ("" when absent)."""
    return "" if x is None else f"{100 * x:.1f}"


def ms(x: float | None) -> str:
    """Milliseconds with as many decimals as their size deserves ("" when absent or NaN)."""
    if x is None or x != x:
        return ""
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def fine_ms(x: float) -> str:
    """Milliseconds to the microsecond below 1 ms (perf.md's sub-millisecond latencies)."""
    return f"{x:.3f}" if x < 1 else f"{x:.2f}" if x < 100 else f"{x:.0f}"


def share(x: float | None) -> str:
    """A share as a whole percentage, `%` included ("" when absent)."""
    return "" if x is None else f"{100 * x:.0f}%"


def points(x: float) -> str:
    """A difference of shares in signed percentage points."""
    return f"{100 * x:+.1f}"


def loads(values: Iterable[float]) -> str:
    """A load average triple as the pages write it."""
    return " / ".join(f"{v:.2f}" for v in values)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,  # a misspelt value is an error, not an empty cell
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(
        pct=pct, ms=ms, fine_ms=fine_ms, share=share, points=points, loads=loads, fmt=format
    )
    return env


_ENV = _env()


@cache
def _blocks(page: str) -> dict[str, jinja2.Template]:
    parts = _BLOCK.split((TEMPLATES / f"{page}.md").read_text(encoding="utf-8"))
    texts = {name: text.strip("\n") for name, text in zip(parts[1::2], parts[2::2], strict=True)}
    # A page's `macros` block is written once and precedes each of its other blocks.
    macros = texts.pop("macros", "")
    return {name: _ENV.from_string(f"{macros}\n{text}") for name, text in texts.items()}


def prose(page: str, block: str, /, **values: object) -> str:
    """Block `block` of bench/templates/PAGE.md rendered with `values`."""
    return _blocks(page)[block].render(values).strip("\n")


def hand_written(path: Path) -> str:
    """A hand-written Markdown file to put in a generated page, without the comment at its top
    that tells its editors how it is used."""
    text = path.read_text(encoding="utf-8").strip()
    if text.startswith("<!--"):
        text = text.split("-->", 1)[1]
    return text.strip()
