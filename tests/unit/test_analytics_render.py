"""Analytics without a store: finishing raw rows, rendering, plotting and parsing `since`."""

from __future__ import annotations

import csv
import io
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from toolselect.analytics import charts, registry, render, surfaces
from toolselect.errors import InvalidInput, NotFound, ToolselectError
from toolselect.records import AnalyticsResult

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
    AnalyticsResult(
        "online_recall",
        registry.ANALYSES["online_recall"].columns,
        (
            ("2025-03-01", "web", "fs_read", 1, 0, 0.0, 1, 0, 1, 0),
            ("2025-03-01", None, "send_email", 3, 2, 0.6667, 0, 1, 0, 0),
            ("2025-03-02", "web", "fs_read", 0, 0, None, 0, 0, 2, 1),  # no known search
            ("2025-03-03", "web", "search_web", 4, 3, 0.75, 0, 1, 0, 0),
        ),
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


def test_csv_has_header_empty_nulls_and_json_lists() -> None:
    """CSV has the column header, an empty field for null and lists as JSON array text."""
    parsed = list(csv.reader(io.StringIO(render.render_csv(MISROUTE))))
    assert parsed == [
        ["used_tool", "turns", "flagged", "rate", "top_reason"],
        ["fs_read", "120", "7", "0.0583", "fallback_tool"],
        ["github__create_issue", "3", "1", "0.3333", ""],
    ]
    conflicts = list(csv.reader(io.StringIO(render.render_csv(SAMPLES[5]))))
    assert conflicts[1] == [
        "find the weather in paris",
        '["search_web","send_email"]',
        '["ranker","teacher"]',
        "3",
    ]


def test_csv_lists_read_back_item_by_item() -> None:
    """A list cell reads back as the very items, whatever separators they hold (`;`, `,`,
    quotes, newlines), and an empty list as an empty one."""
    labels = ("semi;colon", "x", 'a "quoted", line\nbreak', "日本")
    result = AnalyticsResult(
        "label_conflicts", ("query", "labels", "tiers", "turns"), (("q", labels, (), 2),)
    )
    [_, row] = list(csv.reader(io.StringIO(render.render_csv(result))))
    assert json.loads(row[1]) == list(labels)
    assert json.loads(row[2]) == []


def test_table_shows_control_characters_escaped() -> None:
    """A newline, tab, escape or bidi override in a cell is shown escaped, so every row stays one
    line and reads in order."""
    result = AnalyticsResult(
        "cold_tools",
        ("tool",),
        (("line\nbreak",), ("tab\there",), ("esc\x1b[31m",), ("rtl\u202eabc",), ("crlf\r\n",)),
    )
    lines = render.render_table(result).splitlines()
    assert lines[2:] == [
        "line\\nbreak",
        "tab\\there",
        "esc\\x1b[31m",
        "rtl\\u202eabc",
        "crlf\\r\\n",
    ]


def test_table_aligns_by_display_width() -> None:
    """Wide characters (CJK, emoji) take two columns and combining marks none, so the next
    column starts at one display column on every row."""
    result = AnalyticsResult(
        "misroute_rate",
        ("used_tool", "turns"),
        (("日本語ツール", 1), ("cafe\u0301", 22), ("👍", 3), ("plain", 4)),
    )
    assert render.render_table(result).splitlines() == [
        "used_tool     turns",
        "------------  -----",
        "日本語ツール      1",
        "cafe\u0301             22",
        "👍                3",
        "plain             4",
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


def test_finish_orders_online_recall_by_day_pack_and_tool() -> None:
    """online_recall rows order by day, then pack with no pack last, then used tool; recall
    rounds to 4 places and stays null for a group without a known search."""
    zeros = (0, 0, 0, 0)
    result = registry.finish(
        "online_recall",
        [
            ("2025-03-02", None, "a", 3, 1, 1 / 3, *zeros),
            ("2025-03-02", "web", "b", 0, 0, None, 0, 0, 2, 0),
            ("2025-03-01", None, "z", 1, 1, 1.0, *zeros),
            ("2025-03-02", "dev", "c", 3, 2, 2 / 3, *zeros),
        ],
    )
    assert [(r[0], r[1], r[2], r[5]) for r in result.rows] == [
        ("2025-03-01", None, "z", 1.0),
        ("2025-03-02", "dev", "c", 0.6667),
        ("2025-03-02", "web", "b", None),
        ("2025-03-02", None, "a", 0.3333),
    ]


def test_online_recall_table_shows_missing_pack_and_recall_as_dash() -> None:
    """A turn without a pack and a group without a known search read `-` in the table."""
    lines = render.render_table(SAMPLES[-1]).splitlines()
    assert lines[0].split() == list(registry.ANALYSES["online_recall"].columns)
    assert lines[3].split() == [
        "2025-03-01",
        "-",
        "send_email",
        "3",
        "2",
        "0.6667",
        "0",
        "1",
        "0",
        "0",
    ]
    assert lines[4].split() == ["2025-03-02", "web", "fs_read", "0", "0", "-", "0", "0", "2", "1"]


def test_recall_chart_sums_each_day_over_packs_and_tools() -> None:
    """The recall chart draws one point a day with a known search: shown / turns over all packs
    and tools of that day, with the fallback and other-tool shares beside it."""
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    charts.CHARTS["recall_lines"](ax, SAMPLES[-1])
    lines = {line.get_label(): np.asarray(line.get_ydata()).tolist() for line in ax.get_lines()}
    assert lines == {
        "recall (shown / turns)": [2 / 4, 3 / 4],  # 2025-03-02 had no known search: no point
        "not shown: fallback tool": [1 / 4, 0.0],
        "not shown: another tool": [1 / 4, 1 / 4],
    }
    assert [t.get_text() for t in ax.texts] == ["2/4", "3/4"]


def test_recall_chart_without_a_known_search_says_so() -> None:
    """With only unknown or other-pack search ids the chart says how many, instead of lines."""
    from matplotlib.figure import Figure

    only_unknown = AnalyticsResult(
        "online_recall",
        registry.ANALYSES["online_recall"].columns,
        (("2025-03-02", "web", "fs_read", 0, 0, None, 0, 0, 2, 1),),
    )
    ax = Figure().add_subplot()
    charts.CHARTS["recall_lines"](ax, only_unknown)
    assert not ax.get_lines()
    assert [t.get_text() for t in ax.texts] == [
        "no turn with a known search id (2 unknown, 1 of another pack)"
    ]


def test_exemplar_growth_colours_each_tier_alike_and_orders_weakest_first() -> None:
    """Each tier has its own colour whatever tiers a result holds (usage included), and the
    legend lists them ranker, usage, teacher, feedback, then any other."""
    from matplotlib.colors import to_hex
    from matplotlib.figure import Figure

    growth = AnalyticsResult(
        "exemplar_growth",
        ("tool", "day", "tier", "added"),
        (
            ("a", "2025-03-01", "usage", 2),
            ("a", "2025-03-01", "feedback", 1),
            ("b", "2025-03-02", "usage", 1),
            ("b", "2025-03-02", "ratchet", 1),
            ("b", "2025-03-02", "ranker", 1),
        ),
    )
    ax = Figure().add_subplot()
    charts.CHARTS["cumulative_lines"](ax, growth)
    drawn = [(line.get_label(), to_hex(line.get_color())) for line in ax.get_lines()]
    assert drawn == [
        ("ranker", to_hex("tab:blue")),
        ("usage", to_hex("tab:purple")),
        ("feedback", to_hex("tab:green")),
        ("ratchet", to_hex("tab:gray")),
    ]
    assert np.asarray(ax.get_lines()[1].get_ydata()).tolist() == [2, 3]  # usage, cumulative
    alone = AnalyticsResult("exemplar_growth", growth.columns, (growth.rows[0],))
    ax = Figure().add_subplot()
    charts.CHARTS["cumulative_lines"](ax, alone)
    assert to_hex(ax.get_lines()[0].get_color()) == to_hex("tab:purple")


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


@pytest.mark.parametrize(
    "text",
    [
        "yesterday",
        "2025-13-01",
        "1700000000",
        "2025-03-02T25:00",
        "0001-01-01T00:00:00+05:00",
        "9999-12-31T23:59:59-05:00",
    ],
)
def test_parse_since_refuses_other_text(text: str) -> None:
    """Anything else is InvalidInput on field `since`, quoting the value; so is a time whose
    offset puts it before year 1 or after 9999 in UTC."""
    with pytest.raises(InvalidInput) as caught:
        surfaces.parse_since(text)
    assert caught.value.field == "since"
    assert repr(text) in caught.value.message
    # A well-formed time out of range says so, not that it is no ISO-8601 text.
    assert ("years 1 to 9999" in caught.value.message) == text.startswith(("0001", "9999"))


@pytest.mark.parametrize("result", SAMPLES, ids=lambda r: r.name)
def test_plot_writes_a_png_for_each_analysis(result: AnalyticsResult, tmp_path: Path) -> None:
    """plot() draws every analysis's chart kind into a non-empty PNG file."""
    path = charts.plot(result, tmp_path / f"{result.name}.png")
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


def _with_dollars(value: object) -> object:
    """`value` with a `$` pair that is bad mathtext appended to its text."""
    if isinstance(value, str):
        return value + " $\\frac{1$ a$b$"
    if isinstance(value, tuple):
        return tuple(_with_dollars(v) for v in value)
    return value


PAIRS = AnalyticsResult(
    "tool_pairs", ("a", "b", "together"), (("a$b", "price $\\frac{1", 2), ("x", "y$", 1))
)


@pytest.mark.parametrize("result", [*SAMPLES, PAIRS], ids=lambda r: r.name)
def test_plot_draws_names_with_dollars(result: AnalyticsResult, tmp_path: Path) -> None:
    """Names holding `$` (bad mathtext included) plot into a PNG, whatever the chart kind."""
    dollars = AnalyticsResult(
        result.name, result.columns, tuple(tuple(_with_dollars(v) for v in r) for r in result.rows)
    )
    path = charts.plot(dollars, tmp_path / f"{result.name}.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figure_reads_every_text_literally() -> None:
    """A name that is valid mathtext (`$x^2$`) is drawn as typed, not as math: every text of
    the figure has mathtext off, tick labels included."""
    from matplotlib.text import Text

    result = AnalyticsResult("tool_pairs", ("a", "b", "together"), (("$x^2$", "b", 2),))
    fig = charts.figure(result)
    with charts.literal_text():
        fig.draw_without_rendering()
    texts = fig.findobj(Text)
    assert "$x^2$ / b" in [t.get_text() for t in texts]
    assert not [t.get_text() for t in texts if t.get_parse_math()]


def test_plot_makes_no_folder(tmp_path: Path) -> None:
    """A PNG path whose folder is missing is an OSError, and the folder is not created."""
    with pytest.raises(FileNotFoundError):
        charts.plot(MISROUTE, tmp_path / "typo" / "x.png")
    assert not (tmp_path / "typo").exists()
