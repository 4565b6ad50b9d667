"""An analysis result as text: an aligned terminal table, CSV, or the JSON body HTTP serves.

Column-driven only, so a new analysis renders without changes here.
"""

from __future__ import annotations

import csv
import io
import json
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolselect.records import AnalyticsResult

FORMATS: tuple[str, ...] = ("table", "csv", "json")


def to_payload(result: AnalyticsResult) -> dict[str, Any]:
    """The JSON body of `GET /v1/analytics/{name}`: name, columns and rows (lists for tuples)."""

    def plain(value: Any) -> Any:
        return list(value) if isinstance(value, tuple) else value

    return {
        "name": result.name,
        "columns": list(result.columns),
        "rows": [[plain(v) for v in row] for row in result.rows],
    }


def _text(value: Any, *, empty: str) -> str:
    if value is None:
        return empty
    if isinstance(value, tuple | list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# Characters that would move the terminal's cursor or reorder the row's text: a tool name, query
# or pack holding one would split or scramble the table, so a cell shows them escaped.
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_BIDI_CONTROLS = frozenset(
    map(chr, (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)))
)


def _visible_char(ch: str) -> str:
    if ch in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[ch]
    if unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch in _BIDI_CONTROLS:
        return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"
    return ch


def _visible(text: str) -> str:
    return "".join(_visible_char(ch) for ch in text)


def _char_width(ch: str) -> int:
    """Terminal columns: 2 for wide and full-width (CJK, most emoji), 0 for combining marks and
    joiners, else 1 (ambiguous-width characters count 1, as Western terminals draw them)."""
    if unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _width(text: str) -> int:
    return sum(_char_width(ch) for ch in text)


def render_table(result: AnalyticsResult) -> str:
    """Aligned columns for a terminal: numbers right-aligned, null as `-`, lists comma-joined,
    control characters escaped (`\\n`), aligned by display width (a CJK character takes two)."""
    header = list(result.columns)
    cells = [[_visible(_text(v, empty="-")) for v in row] for row in result.rows]
    widths = [max([_width(h)] + [_width(r[i]) for r in cells]) for i, h in enumerate(header)]
    right = [
        any(_numeric(row[i]) for row in result.rows)
        and all(_numeric(row[i]) or row[i] is None for row in result.rows)
        for i in range(len(header))
    ]

    def line(values: Sequence[str]) -> str:
        parts = []
        for value, width, to_right in zip(values, widths, right, strict=True):
            pad = " " * (width - _width(value))
            parts.append(pad + value if to_right else value + pad)
        return "  ".join(parts).rstrip()

    lines = [line(header), line(["-" * w for w in widths])]
    lines += [line(row) for row in cells] or ["(no rows)"]
    return "\n".join(lines)


def _csv_field(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, tuple | list):
        # A JSON array, not `a;b`: a list item may hold any separator (a tool `semi;colon`).
        return json.dumps(list(value), ensure_ascii=False, separators=(",", ":"))
    return str(value)


def render_csv(result: AnalyticsResult) -> str:
    """CSV with a header row; null is an empty field, a list is one field of JSON array text
    (`["a","b"]`)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([_csv_field(v) for v in row] for row in result.rows)
    return out.getvalue()


def render_json(result: AnalyticsResult) -> str:
    """One JSON object: the HTTP body of the analysis."""
    return json.dumps(to_payload(result), ensure_ascii=False)


RENDERERS: Mapping[str, Callable[[AnalyticsResult], str]] = {
    "table": render_table,
    "csv": render_csv,
    "json": render_json,
}
