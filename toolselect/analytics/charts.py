"""An analysis result as a PNG chart (`toolselect analytics --plot`); matplotlib is optional.

matplotlib is imported inside the functions that draw, so importing this module costs nothing
and a missing matplotlib is reported only when a chart is asked for. Each chart kind reads the
columns it needs by name; the registry says which kind an analysis gets.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolselect.analytics.registry import Analysis, ChartKind, get_analysis
from toolselect.errors import ToolselectError
from toolselect.names import namespace
from toolselect.records import TIER_STRENGTH, AnalyticsResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def require_matplotlib() -> None:
    """Raise a `ToolselectError` naming the install when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ToolselectError(
            "plotting needs matplotlib, which is not installed: pip install matplotlib"
        ) from exc


def _column(result: AnalyticsResult, name: str) -> list[Any]:
    index = result.columns.index(name)
    return [row[index] for row in result.rows]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bars(ax: Axes, result: AnalyticsResult) -> None:
    """Any columns: one bar per row, as long as the first numeric column, named by the rest."""
    numeric = [
        i
        for i in range(len(result.columns))
        if all(_is_number(row[i]) or row[i] is None for row in result.rows)
        and any(_is_number(row[i]) for row in result.rows)
    ]
    if not numeric:
        ax.text(0.5, 0.5, "no numeric column", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    value = numeric[0]
    names = [
        " / ".join(str(v) for i, v in enumerate(row) if i not in numeric and v is not None)
        or str(n + 1)
        for n, row in enumerate(result.rows)
    ]
    ys = range(len(names))
    ax.barh(ys, [row[value] or 0 for row in result.rows], color="tab:blue")
    ax.set_yticks(list(ys), names)
    ax.set_xlabel(result.columns[value])
    ax.invert_yaxis()


def _rate_bars(ax: Axes, result: AnalyticsResult) -> None:
    bars = ax.barh(_column(result, "used_tool"), _column(result, "rate"), color="tab:red")
    shares = [
        f"{f}/{t}"
        for f, t in zip(_column(result, "flagged"), _column(result, "turns"), strict=True)
    ]
    ax.bar_label(bars, shares, padding=3)
    ax.set_xlim(0, 1.15)
    ax.set_xlabel("flagged / turns")
    ax.invert_yaxis()


def _tier_bars(ax: Axes, result: AnalyticsResult) -> None:
    from matplotlib.ticker import MaxNLocator

    pairs = zip(_column(result, "tier"), _column(result, "result"), strict=True)
    keys = [f"{tier or '-'} / {outcome or '-'}" for tier, outcome in pairs]
    ys = range(len(keys))
    ax.barh([y - 0.2 for y in ys], _column(result, "decisions"), 0.4, label="decisions")
    ax.barh([y + 0.2 for y in ys], _column(result, "teacher_calls"), 0.4, label="calls")
    ax.set_yticks(list(ys), keys)
    ax.set_ylabel("tier / result")
    ax.set_xlabel("count")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.invert_yaxis()
    ax.legend()


def _namespace_counts(ax: Axes, result: AnalyticsResult) -> None:
    """How many of the listed tools each namespace has."""
    from matplotlib.ticker import MaxNLocator

    spaces: dict[str, int] = {}
    for tool in _column(result, "tool"):
        key = namespace(tool) or "(no namespace)"
        spaces[key] = spaces.get(key, 0) + 1
    ax.bar(list(spaces), list(spaces.values()), color="tab:blue")
    ax.set_ylabel("cold tools")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(axis="x", labelrotation=45)


def _heatmap(ax: Axes, result: AnalyticsResult) -> None:
    used = sorted(set(_column(result, "used_tool")))
    labels = sorted(set(_column(result, "label")))
    grid = [[0] * len(labels) for _ in used]
    for u, lab, turns in result.rows:
        grid[used.index(u)][labels.index(lab)] = turns
    image = ax.imshow(grid, cmap="Reds", aspect="auto")
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(used)), used)
    ax.set_xlabel("labelled tool")
    ax.set_ylabel("used tool")
    for y, row in enumerate(grid):
        for x, value in enumerate(row):
            if value:
                ax.text(x, y, str(value), ha="center", va="center")
    ax.figure.colorbar(image, ax=ax, label="turns")


def _by_day(ax: Axes) -> None:
    ax.set_xlabel("day (UTC)")
    ax.tick_params(axis="x", labelrotation=45)
    ax.legend()


def _rate_lines(ax: Axes, result: AnalyticsResult) -> None:
    days = sorted(set(_column(result, "day")))
    ax.plot(days, _column(result, "flagged_rate"), marker="o", label="flagged rate")
    ax.plot(days, _column(result, "escalation_rate"), marker="o", label="escalation rate")
    ax.set_ylabel("rate")
    _by_day(ax)


# One colour per exemplar tier, whichever tiers a result holds, so a tier keeps its colour from
# one chart to the next; the dashboard (`toolselect/ui/app.js`, TIERS) uses the same order.
TIER_COLOURS: Mapping[str, str] = {
    "ranker": "tab:blue",
    "usage": "tab:purple",
    "teacher": "tab:orange",
    "feedback": "tab:green",
}


def _tier_order(tier: str) -> tuple[int, str]:
    """Tiers weakest first (ranker, usage, teacher, feedback), any other after, by name."""
    return (TIER_STRENGTH.get(tier, len(TIER_STRENGTH) + 1), tier)


def _cumulative_lines(ax: Axes, result: AnalyticsResult) -> None:
    """Exemplars added per day, summed over time, one line per tier."""
    days = sorted(set(_column(result, "day")))
    per_tier: dict[str, dict[str, int]] = {}
    for day, tier, added in zip(
        _column(result, "day"), _column(result, "tier"), _column(result, "added"), strict=True
    ):
        by_day = per_tier.setdefault(tier, {})
        by_day[day] = by_day.get(day, 0) + added
    for tier in sorted(per_tier, key=_tier_order):
        by_day, total, ys = per_tier[tier], 0, []
        for day in days:
            total += by_day.get(day, 0)
            ys.append(total)
        ax.plot(days, ys, marker="o", label=tier, color=TIER_COLOURS.get(tier, "tab:gray"))
    ax.set_ylabel("exemplars (cumulative)")
    _by_day(ax)


def _recall_lines(ax: Axes, result: AnalyticsResult) -> None:
    """Per day over all packs and tools: recall (shown / turns whose search is known), and the
    share of those turns that used a fallback tool or another tool that was not shown."""
    from matplotlib.ticker import PercentFormatter

    counted = ("turns", "shown", "fallbacks", "ignored", "unknown_ids", "other_pack")
    sums: dict[str, list[int]] = {}
    for day, *values in zip(
        _column(result, "day"), *(_column(result, c) for c in counted), strict=True
    ):
        day_sums = sums.setdefault(day, [0] * len(counted))
        for i, value in enumerate(values):
            day_sums[i] += value
    days = [day for day in sorted(sums) if sums[day][0]]
    if not days:
        unknown = sum(t[4] for t in sums.values())
        other = sum(t[5] for t in sums.values())
        ax.text(
            0.5,
            0.5,
            f"no turn with a known search id ({unknown} unknown, {other} of another pack)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
        return
    known = [sums[day] for day in days]
    lines = (
        (1, "recall (shown / turns)", "tab:blue"),
        (2, "not shown: fallback tool", "tab:red"),
        (3, "not shown: another tool", "tab:orange"),
    )
    for index, label, colour in lines:
        shares = [t[index] / t[0] for t in known]
        ax.plot(days, shares, marker="o", color=colour, label=label)
    for day, t in zip(days, known, strict=True):
        ax.annotate(
            f"{t[1]}/{t[0]}",
            (day, t[1] / t[0]),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=8,
        )
    ax.set_ylim(0, 1.1)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel("share of turns whose search is known")
    _by_day(ax)


def _table_bars(ax: Axes, result: AnalyticsResult) -> None:
    queries = [q if len(q) <= 40 else q[:39] + "…" for q in _column(result, "query")]
    turns = _column(result, "turns")
    bars = ax.barh(range(len(queries)), turns, color="tab:orange")
    ax.set_yticks(range(len(queries)), queries)
    ax.bar_label(bars, [" / ".join(labels) for labels in _column(result, "labels")], padding=3)
    ax.set_xlim(0, max(turns) * 1.8)  # room for the label text right of each bar
    ax.set_xlabel("turns")
    ax.invert_yaxis()


CHARTS: Mapping[ChartKind, Callable[[Axes, AnalyticsResult], None]] = {
    "bars": _bars,
    "rate_bars": _rate_bars,
    "tier_bars": _tier_bars,
    "namespace_counts": _namespace_counts,
    "heatmap": _heatmap,
    "rate_lines": _rate_lines,
    "cumulative_lines": _cumulative_lines,
    "table_bars": _table_bars,
    "recall_lines": _recall_lines,
}


def literal_text() -> AbstractContextManager[None]:
    """Mathtext off for the texts made inside: tool names, queries and packs are the user's
    text, so `a$b$` must read as typed and `$\\frac{1$` must not stop the chart."""
    from matplotlib import rc_context

    return rc_context({"text.parse_math": False})


def figure(result: AnalyticsResult, analysis: Analysis | None = None) -> Figure:
    """The chart of `analysis` (by default the registered one of the result's name); an empty
    result says so. Draw or save it inside `literal_text()` too: tick labels are made then."""
    require_matplotlib()
    from matplotlib.figure import Figure

    analysis = analysis or get_analysis(result.name)
    with literal_text():
        # A Figure without pyplot: no backend or figure registry is touched (rcParams only
        # while it is drawn, by `literal_text`).
        fig = Figure(figsize=(10, max(4.0, 0.35 * len(result.rows) + 2)), layout="constrained")
        ax = fig.add_subplot()
        ax.set_title(f"{result.name}\n{textwrap.fill(analysis.description, 110)}", fontsize=10)
        if result.rows:
            CHARTS[analysis.chart](ax, result)
        else:
            ax.text(0.5, 0.5, "no rows", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
    return fig


def plot(result: AnalyticsResult, path: Path, analysis: Analysis | None = None) -> Path:
    """`figure()` as a PNG at `path`, whose folder must exist: a mistyped folder is an
    `OSError`, never created."""
    fig = figure(result, analysis)
    with literal_text():
        fig.savefig(path, format="png", dpi=100)
    return path
