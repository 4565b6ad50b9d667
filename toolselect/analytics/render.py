"""An analysis result as text: an aligned terminal table, CSV, or the JSON body HTTP serves.

Column-driven only, so a new analysis renders without changes here.
"""

from __future__ import annotations

import csv
import io
import json
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


def _text(value: Any, *, empty: str, joiner: str) -> str:
    if value is None:
        return empty
    if isinstance(value, tuple | list):
        return joiner.join(str(v) for v in value)
    return str(value)


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def render_table(result: AnalyticsResult) -> str:
    """Aligned columns for a terminal: numbers right-aligned, null as `-`, lists comma-joined."""
    header = list(result.columns)
    cells = [[_text(v, empty="-", joiner=", ") for v in row] for row in result.rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    right = [
        any(_numeric(row[i]) for row in result.rows)
        and all(_numeric(row[i]) or row[i] is None for row in result.rows)
        for i in range(len(header))
    ]

    def line(values: Sequence[str]) -> str:
        parts = (
            v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)
        )
        return "  ".join(parts).rstrip()

    lines = [line(header), line(["-" * w for w in widths])]
    lines += [line(row) for row in cells] or ["(no rows)"]
    return "\n".join(lines)


def render_csv(result: AnalyticsResult) -> str:
    """CSV with a header row; null is an empty field, lists are joined with `;`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([_text(v, empty="", joiner=";") for v in row] for row in result.rows)
    return out.getvalue()


def render_json(result: AnalyticsResult) -> str:
    """One JSON object: the HTTP body of the analysis."""
    return json.dumps(to_payload(result), ensure_ascii=False)


RENDERERS: Mapping[str, Callable[[AnalyticsResult], str]] = {
    "table": render_table,
    "csv": render_csv,
    "json": render_json,
}
