"""The named analyses of the learning loop: what each answers, how its rows are finished, shown,
plotted and served (CLI `toolselect analytics`, `GET /v1/analytics`).

Each analysis is one Cypher file `cypher/analytics/<name>.cypher` (the Neo4j store runs it; it also
runs as is in Neo4j Browser) and the same query in SQL (`graph/sqlite_analytics.py`). Both stores
return exact raw values (ints, unrounded float ratios, cost sums added smallest first) and pass them
through `finish()` here, the one place that rounds, sorts lists, merges and orders rows, so equal data
gives equal rows from either store.
"""

from __future__ import annotations

import csv
import io
import json
import math
import operator
import re
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from toolselect.errors import InvalidInput, NotFound, ToolselectError
from toolselect.graph.store import AnalyticsResult, Store
from toolselect.names import namespace, normalise_query

if TYPE_CHECKING:
    from matplotlib.axes import Axes

Row = tuple[Any, ...]
ChartKind = Literal["bars", "heatmap", "timeseries", "table_bars"]
FORMATS: tuple[str, ...] = ("table", "csv", "json")


def _nulls_last(value: Any) -> tuple[bool, Any]:
    return (value is None, "" if value is None else value)


@dataclass(frozen=True, slots=True)
class Analysis:
    """One named analysis: its columns, what it answers, its chart, and how rows are finished.

    `order` is the sort key of finished rows (Python order, so code-point order for text on both
    stores); `rounding` maps float columns to decimal places; `regroup` merges raw rows first.
    """

    name: str
    columns: tuple[str, ...]
    description: str
    chart: ChartKind
    order: Callable[[Row], Any]
    rounding: Mapping[str, int] = field(default_factory=dict)
    regroup: Callable[[list[Row]], list[Row]] | None = None


def _merge_label_conflicts(rows: list[Row]) -> list[Row]:
    """Merge per-request rows by `normalise_query`, keep the groups with more than one label.

    Done here, not in the query: Cypher's toLower/trim and SQLite's ASCII lower() each differ from
    NFKC + casefold, so only Python groups alike on both stores.
    """
    labels: dict[str, set[str]] = {}
    tiers: dict[str, set[str]] = {}
    turns: dict[str, int] = {}
    for request, row_labels, row_tiers, row_turns in rows:
        query = normalise_query(request)
        labels.setdefault(query, set()).update(row_labels)
        tiers.setdefault(query, set()).update(row_tiers)
        turns[query] = turns.get(query, 0) + row_turns
    return [
        (query, tuple(sorted(labels[query])), tuple(sorted(tiers[query])), turns[query])
        for query in turns
        if len(labels[query]) > 1
    ]


_ALL = (
    Analysis(
        "misroute_rate",
        ("used_tool", "turns", "flagged", "rate", "top_reason"),
        "per used tool: turns, flagged turns, their rate and the most frequent flag reason",
        "bars",
        order=lambda r: (-r[2], r[0]),
        rounding={"rate": 4},
    ),
    Analysis(
        "confusions",
        ("used_tool", "label", "turns"),
        "(used tool -> labelled tool) pairs among flagged, labelled turns",
        "heatmap",
        order=lambda r: (-r[2], r[0], r[1]),
    ),
    Analysis(
        "oracle_usage",
        (
            "tier",
            "result",
            "decisions",
            "teacher_calls",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "latency_p50_ms",
            "latency_p95_ms",
        ),
        "per oracle tier and result among flagged turns: decisions, teacher calls, tokens, cost "
        "and latency percentiles (nearest rank)",
        "bars",
        order=lambda r: (_nulls_last(r[0]), _nulls_last(r[1])),
        rounding={"cost_usd": 6},
    ),
    Analysis(
        "exemplar_growth",
        ("tool", "day", "tier", "added"),
        "exemplars (still stored) added per tool, UTC day and tier",
        "timeseries",
        order=lambda r: (r[1], r[0], r[2]),
    ),
    Analysis(
        "cold_tools",
        ("tool",),
        "tools never ranked first, never used and never labelled",
        "bars",
        order=lambda r: r[0],
    ),
    Analysis(
        "label_conflicts",
        ("query", "labels", "tiers", "turns"),
        "normalised requests whose flagged turns got different labels",
        "table_bars",
        order=lambda r: (-r[3], r[0]),
        regroup=_merge_label_conflicts,
    ),
    Analysis(
        "drift",
        ("day", "turns", "flagged_rate", "escalation_rate"),
        "per UTC day: turns, share flagged, share of flagged turns sent to the teacher",
        "timeseries",
        order=lambda r: r[0],
        rounding={"flagged_rate": 4, "escalation_rate": 4},
    ),
)
ANALYSES: Mapping[str, Analysis] = {a.name: a for a in _ALL}
NAMES: tuple[str, ...] = tuple(ANALYSES)


def get_analysis(name: str) -> Analysis:
    """The analysis called `name`; `NotFound` names the known ones."""
    try:
        return ANALYSES[name]
    except KeyError:
        raise NotFound(f"no analysis named {name!r}; known: {', '.join(NAMES)}") from None


# --- shared post-processing (both stores call finish) -----------------------------------------


def nearest_rank(values: Iterable[float], p: float) -> float | None:
    """The value at index ceil(p * n) - 1 of the sorted values (Cypher's percentileDisc)."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(math.ceil(p * len(ordered)) - 1, 0)]


def ordered_sum(values: Iterable[float]) -> float:
    """Add floats smallest first from 0.0, exactly as the Cypher files do, so sums match bit for bit.

    Not `sum()` or SQL SUM: their order and (in newer Pythons and SQLite) compensation differ.
    """
    return reduce(operator.add, sorted(values), 0.0)


def _value(value: Any, places: int | None) -> Any:
    if isinstance(value, list | tuple):
        return tuple(sorted(value))
    if places is not None and isinstance(value, float):
        return round(value, places)
    return value


def finish(name: str, rows: Iterable[Sequence[Any]]) -> AnalyticsResult:
    """Raw rows of a store (in column order) -> the analysis result every store returns."""
    analysis = get_analysis(name)
    places = [analysis.rounding.get(column) for column in analysis.columns]
    cleaned = [tuple(_value(v, p) for v, p in zip(row, places, strict=True)) for row in rows]
    if analysis.regroup is not None:
        cleaned = analysis.regroup(cleaned)
    return AnalyticsResult(name, analysis.columns, tuple(sorted(cleaned, key=analysis.order)))


# --- rendering --------------------------------------------------------------------------------


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


_RENDERERS: Mapping[str, Callable[[AnalyticsResult], str]] = {
    "table": render_table,
    "csv": render_csv,
    "json": render_json,
}


# --- plotting (matplotlib is optional) --------------------------------------------------------


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ToolselectError(
            "plotting needs matplotlib, which is not installed: pip install matplotlib"
        ) from exc


def _column(result: AnalyticsResult, name: str) -> list[Any]:
    index = result.columns.index(name)
    return [row[index] for row in result.rows]


def _bars(ax: Axes, result: AnalyticsResult) -> None:
    from matplotlib.ticker import MaxNLocator

    counts = MaxNLocator(integer=True)
    if result.name == "misroute_rate":
        bars = ax.barh(_column(result, "used_tool"), _column(result, "rate"), color="tab:red")
        shares = [f"{r[2]}/{r[1]}" for r in result.rows]
        ax.bar_label(bars, shares, padding=3)
        ax.set_xlim(0, 1.15)
        ax.set_xlabel("flagged / turns")
        ax.invert_yaxis()
    elif result.name == "oracle_usage":
        keys = [f"{r[0] or '-'} / {r[1] or '-'}" for r in result.rows]
        ys = range(len(keys))
        ax.barh([y - 0.2 for y in ys], _column(result, "decisions"), 0.4, label="decisions")
        ax.barh([y + 0.2 for y in ys], _column(result, "teacher_calls"), 0.4, label="calls")
        ax.set_yticks(list(ys), keys)
        ax.set_ylabel("tier / result")
        ax.set_xlabel("count")
        ax.xaxis.set_major_locator(counts)
        ax.invert_yaxis()
        ax.legend()
    else:  # cold_tools: how many cold tools each namespace has
        spaces: dict[str, int] = {}
        for tool in _column(result, "tool"):
            key = namespace(tool) or "(no namespace)"
            spaces[key] = spaces.get(key, 0) + 1
        ax.bar(list(spaces), list(spaces.values()), color="tab:blue")
        ax.set_ylabel("cold tools")
        ax.yaxis.set_major_locator(counts)
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


def _timeseries(ax: Axes, result: AnalyticsResult) -> None:
    days = sorted(set(_column(result, "day")))
    if result.name == "drift":
        ax.plot(days, _column(result, "flagged_rate"), marker="o", label="flagged rate")
        ax.plot(days, _column(result, "escalation_rate"), marker="o", label="escalation rate")
        ax.set_ylabel("rate")
    else:  # exemplar_growth: cumulative exemplars per tier
        per_tier: dict[str, dict[str, int]] = {}
        for _tool, day, tier, added in result.rows:
            by_day = per_tier.setdefault(tier, {})
            by_day[day] = by_day.get(day, 0) + added
        for tier, by_day in sorted(per_tier.items()):
            total, ys = 0, []
            for day in days:
                total += by_day.get(day, 0)
                ys.append(total)
            ax.plot(days, ys, marker="o", label=tier)
        ax.set_ylabel("exemplars (cumulative)")
    ax.set_xlabel("day (UTC)")
    ax.tick_params(axis="x", labelrotation=45)
    ax.legend()


def _table_bars(ax: Axes, result: AnalyticsResult) -> None:
    queries = [q if len(q) <= 40 else q[:39] + "…" for q in _column(result, "query")]
    turns = _column(result, "turns")
    bars = ax.barh(range(len(queries)), turns, color="tab:orange")
    ax.set_yticks(range(len(queries)), queries)
    ax.bar_label(bars, [" / ".join(labels) for labels in _column(result, "labels")], padding=3)
    ax.set_xlim(0, max(turns) * 1.8)  # room for the label text right of each bar
    ax.set_xlabel("turns")
    ax.invert_yaxis()


_CHARTS: Mapping[ChartKind, Callable[[Axes, AnalyticsResult], None]] = {
    "bars": _bars,
    "heatmap": _heatmap,
    "timeseries": _timeseries,
    "table_bars": _table_bars,
}


def plot(result: AnalyticsResult, path: Path) -> Path:
    """Draw the analysis's chart to a PNG at `path` (an empty result says so in the image)."""
    _require_matplotlib()
    from matplotlib.figure import Figure

    analysis = get_analysis(result.name)
    # A Figure without pyplot: no global backend or figure registry is touched.
    fig = Figure(figsize=(10, max(4.0, 0.35 * len(result.rows) + 2)), layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(f"{result.name}\n{textwrap.fill(analysis.description, 110)}", fontsize=10)
    if result.rows:
        _CHARTS[analysis.chart](ax, result)
    else:
        ax.text(0.5, 0.5, "no rows", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100)
    return path


_plot = plot  # cli_analytics's `plot` parameter shadows the function


# --- surfaces: CLI and HTTP (wired in cmd/ and api/) ------------------------------------------

_SPACED_OFFSET = re.compile(r"(?<=\d) (\d{2}(?::?\d{2})?)$")


def parse_since(text: str | None) -> datetime | None:
    """An ISO-8601 date or datetime as aware UTC (naive means UTC); None or blank is all time.

    A query string decodes `+00:00` to ` 00:00`; that space is read back as `+`.
    """
    if text is None or not text.strip():
        return None
    cleaned = _SPACED_OFFSET.sub(r"+\1", text.strip())
    try:
        value = datetime.fromisoformat(cleaned)
    except ValueError:
        raise InvalidInput(
            f"expected since as an ISO-8601 date or datetime, got {text!r}", "since"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def analyses_payload() -> dict[str, Any]:
    """The body of `GET /v1/analytics`."""
    return {"analyses": list(NAMES)}


async def analysis_payload(store: Store, name: str, since: str | None) -> dict[str, Any]:
    """The body of `GET /v1/analytics/{name}?since=`; NotFound (404) or InvalidInput (422)."""
    get_analysis(name)
    result = await store.analytics(name, parse_since(since))
    return to_payload(result)


async def cli_analytics(
    store: Store, name: str | None, since: datetime | None, fmt: str, plot: Path | None
) -> str:
    """The output of `toolselect analytics [NAME] [--since] [--format] [--plot PATH]`.

    Without a name every analysis runs, one after another: `table` gives each a `== name ==`
    title line, `csv` a `# name` line, `json` one JSON object per line (JSON Lines). `--plot`
    writes the PNG to PATH for one analysis, or `PATH/<name>.png` for each when all run.
    """
    if fmt not in _RENDERERS:
        raise InvalidInput(f"expected format in {', '.join(FORMATS)}, got {fmt!r}", "format")
    names = NAMES if name is None else (get_analysis(name).name,)
    if plot is not None:
        _require_matplotlib()  # before any query: fail fast
    results = [await store.analytics(n, since) for n in names]
    if plot is not None:
        for result in results:
            _plot(result, plot if name is not None else plot / f"{result.name}.png")
    render = _RENDERERS[fmt]
    if name is not None:
        return render(results[0])
    if fmt == "json":
        return "\n".join(render(r) for r in results)
    title = "== {} ==" if fmt == "table" else "# {}"
    return "\n\n".join(f"{title.format(r.name)}\n{render(r).rstrip()}" for r in results)
