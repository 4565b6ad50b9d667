"""Analytics without a store: finishing raw rows, rendering, plotting and parsing `since`."""

from __future__ import annotations

import csv
import io
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from toolselect.analytics import charts, registry, render, surfaces
from toolselect.errors import InvalidInput, NotFound, ToolselectError
from toolselect.graph.store import AnalyticsResult

MISROUTE = AnalyticsResult(
    "misroute_rate",
    ("used_tool", "turns", "flagged", "rate", "top_reason"),
    (
        ("fs_read", 120, 7, 0.0583, "fallback_tool"),
        ("github__create_issue", 3, 1, 0.3333, None),
    ),
)

# One small result per analysis, shaped like the stores' output, for the plots.
SAMPLES = (
    MISROUTE,
    AnalyticsResult(
        "confusions",
        ("used_tool", "label", "turns"),
        (("fs_read", "search_web", 2), ("fs_read", "send_email", 1), ("web", "send_email", 4)),
    ),
    AnalyticsResult(
        "oracle_usage",
        registry.ANALYSES["oracle_usage"].columns,
        (
            ("ranker", "labeled", 2, 0, 0, 0, 0.0, None, None),
            ("teacher", "labeled", 4, 5, 2200, 29, 0.000618, 950.0, 2000.0),
            (None, "declined", 2, 0, 0, 0, 0.0, None, None),
        ),
    ),
    AnalyticsResult(
        "exemplar_growth",
        ("tool", "day", "tier", "added"),
        (
            ("search_web", "2025-03-01", "ranker", 1),
            ("send_email", "2025-03-01", "teacher", 1),
            ("send_email", "2025-03-03", "feedback", 2),
        ),
    ),
    AnalyticsResult("cold_tools", ("tool",), (("notes__archive",), ("pdf__extract",), ("zz",))),
    AnalyticsResult(
        "label_conflicts",
        ("query", "labels", "tiers", "turns"),
        (("find the weather in paris", ("search_web", "send_email"), ("ranker", "teacher"), 3),),
    ),
    AnalyticsResult(
        "drift",
        ("day", "turns", "flagged_rate", "escalation_rate"),
        (("2025-03-01", 4, 0.75, 0.6667), ("2025-03-02", 5, 0.8, 0.75)),
    ),
)


def test_table_aligns_columns_and_shows_null_as_dash() -> None:
    """The table right-aligns numeric columns, left-aligns text and prints null as `-`."""
    lines = render.render_table(MISROUTE).splitlines()
    assert lines == [
        "used_tool             turns  flagged    rate  top_reason",
        "--------------------  -----  -------  ------  -------------",
        "fs_read                 120        7  0.0583  fallback_tool",
        "github__create_issue      3        1  0.3333  -",
    ]


def test_table_of_no_rows_says_so() -> None:
    """An empty result still shows its header, then `(no rows)`."""
    empty = AnalyticsResult("cold_tools", ("tool",), ())
    assert render.render_table(empty) == "tool\n----\n(no rows)"


def test_table_joins_list_values() -> None:
    """List values are shown comma-joined in a table cell."""
    table = render.render_table(SAMPLES[5])
    assert "search_web, send_email" in table
    assert "ranker, teacher" in table


def test_csv_has_header_empty_nulls_and_joined_lists() -> None:
    """CSV has the column header, an empty field for null and `;`-joined lists."""
    parsed = list(csv.reader(io.StringIO(render.render_csv(MISROUTE))))
    assert parsed == [
        ["used_tool", "turns", "flagged", "rate", "top_reason"],
        ["fs_read", "120", "7", "0.0583", "fallback_tool"],
        ["github__create_issue", "3", "1", "0.3333", ""],
    ]
    conflicts = list(csv.reader(io.StringIO(render.render_csv(SAMPLES[5]))))
    assert conflicts[1] == [
        "find the weather in paris",
        "search_web;send_email",
        "ranker;teacher",
        "3",
    ]


def test_json_is_the_http_body() -> None:
    """JSON output is one object with name, columns and rows; tuples become arrays, None null."""
    body = json.loads(render.render_json(SAMPLES[5]))
    assert body == {
        "name": "label_conflicts",
        "columns": ["query", "labels", "tiers", "turns"],
        "rows": [
            ["find the weather in paris", ["search_web", "send_email"], ["ranker", "teacher"], 3]
        ],
    }
    assert json.loads(render.render_json(MISROUTE))["rows"][1][4] is None


def test_finish_rounds_sorts_lists_and_orders_rows() -> None:
    """finish rounds the analysis's float columns, sorts list values and applies the row order."""
    result = registry.finish(
        "misroute_rate",
        [("b", 3, 1, 1 / 3, None), ("a", 3, 1, 1 / 3, "x"), ("c", 9, 4, 4 / 9, "y")],
    )
    assert result.rows == (
        ("c", 9, 4, 0.4444, "y"),
        ("a", 3, 1, 0.3333, "x"),
        ("b", 3, 1, 0.3333, None),
    )
    conflicts = registry.finish("label_conflicts", [("Q", ["b", "a"], ["z", "y"], 2)])
    assert conflicts.rows == (("q", ("a", "b"), ("y", "z"), 2),)


def test_finish_puts_null_tiers_last() -> None:
    """oracle_usage rows order by tier then result, nulls after every name."""
    zeros = (1, 0, 0, 0, 0.0, None, None)
    result = registry.finish(
        "oracle_usage",
        [(None, "declined", *zeros), ("teacher", None, *zeros), ("ranker", "labeled", *zeros)],
    )
    assert [r[:2] for r in result.rows] == [
        ("ranker", "labeled"),
        ("teacher", None),
        (None, "declined"),
    ]


def test_nearest_rank_and_ordered_sum() -> None:
    """nearest_rank takes index ceil(p*n)-1 of the sorted values; ordered_sum adds smallest first."""
    assert registry.nearest_rank([], 0.5) is None
    assert registry.nearest_rank([3.0], 0.95) == 3.0
    assert registry.nearest_rank([4.0, 1.0, 3.0, 2.0], 0.5) == 2.0
    assert registry.nearest_rank(range(1, 21), 0.95) == 19
    assert registry.nearest_rank(range(1, 22), 0.95) == 20
    assert registry.ordered_sum([]) == 0.0
    assert registry.ordered_sum([1e16, 1.0, 1.0]) == (1.0 + 1.0) + 1e16


def test_unknown_analysis_is_not_found() -> None:
    """Finishing rows of an unknown analysis raises NotFound naming the known ones."""
    with pytest.raises(NotFound, match="known: misroute_rate, confusions"):
        registry.finish("nope", [])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, None),
        ("", None),
        ("2025-03-02", datetime(2025, 3, 2, tzinfo=UTC)),
        ("2025-03-02T10:30:00Z", datetime(2025, 3, 2, 10, 30, tzinfo=UTC)),
        ("2025-03-02T10:30:00+02:00", datetime(2025, 3, 2, 8, 30, tzinfo=UTC)),
        # `+02:00` in a query string arrives as ` 02:00`
        ("2025-03-02T10:30:00 02:00", datetime(2025, 3, 2, 8, 30, tzinfo=UTC)),
    ],
)
def test_parse_since_reads_iso_8601(text: str | None, expected: datetime | None) -> None:
    """since parses ISO-8601 dates and datetimes into aware UTC; absent or blank is all time."""
    got = surfaces.parse_since(text)
    assert got == expected
    if got is not None:
        assert got.utcoffset() == timedelta(0)
        assert got.tzinfo is UTC


@pytest.mark.parametrize("text", ["yesterday", "2025-13-01", "1700000000", "2025-03-02T25:00"])
def test_parse_since_refuses_other_text(text: str) -> None:
    """Anything else is InvalidInput on field `since`, quoting the value."""
    with pytest.raises(InvalidInput) as caught:
        surfaces.parse_since(text)
    assert caught.value.field == "since"
    assert repr(text) in caught.value.message


@pytest.mark.parametrize("result", SAMPLES, ids=lambda r: r.name)
def test_plot_writes_a_png_for_each_analysis(result: AnalyticsResult, tmp_path: Path) -> None:
    """plot() draws every analysis's chart kind into a non-empty PNG file."""
    path = charts.plot(result, tmp_path / "out" / f"{result.name}.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5_000


@pytest.mark.parametrize("name", registry.NAMES)
def test_plot_of_no_rows_still_writes_a_png(name: str, tmp_path: Path) -> None:
    """An empty result plots a PNG that says there are no rows, instead of failing."""
    empty = AnalyticsResult(name, registry.ANALYSES[name].columns, ())
    path = charts.plot(empty, tmp_path / f"{name}.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_plot_without_matplotlib_names_the_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without matplotlib, plot() raises a ToolselectError that says `pip install matplotlib`."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(ToolselectError, match="pip install matplotlib"):
        charts.plot(MISROUTE, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
