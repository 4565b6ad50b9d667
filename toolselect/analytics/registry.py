"""The registry of named analyses: what each answers, its columns and chart, and how its rows
are finished. Both stores import this module and nothing else of `toolselect.analytics`.

Each analysis is one Cypher file `cypher/analytics/<name>.cypher` (the Neo4j store runs it; it also
runs as is in Neo4j Browser), the same query in SQL (`store/sqlite/analytics.py`) and one entry of
`_ALL` below; the HTTP, MCP and CLI surfaces, the OpenAPI document and the dashboard list it from
here. Both stores return exact raw values (ints, unrounded float ratios, cost sums added smallest
first) and pass them through `finish()`, the one place that rounds, sorts lists, merges and orders
rows, so equal data gives equal rows from either store.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Literal

from toolselect.errors import NotFound
from toolselect.keys import shown
from toolselect.names import normalise_query
from toolselect.records import AnalyticsResult

Row = tuple[Any, ...]
# What `charts.plot` draws. Each kind reads columns by name, never the analysis's name, so a new
# analysis picks one here and needs no plotting code; `bars` fits any columns.
ChartKind = Literal[
    "bars",
    "rate_bars",
    "tier_bars",
    "namespace_counts",
    "heatmap",
    "rate_lines",
    "cumulative_lines",
    "table_bars",
    "recall_lines",
]


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


# One entry per analysis, in the order every surface lists them. The name must match the
# `.cypher` file and the SQL twin's key; `tests/unit/test_analytics_registry.py` checks both.
_ALL = (
    Analysis(
        "misroute_rate",
        ("used_tool", "turns", "flagged", "rate", "top_reason"),
        "per used tool: turns, flagged turns, their rate and the most frequent flag reason",
        "rate_bars",
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
        "tier_bars",
        order=lambda r: (_nulls_last(r[0]), _nulls_last(r[1])),
        rounding={"cost_usd": 6},
    ),
    Analysis(
        "exemplar_growth",
        ("tool", "day", "tier", "added"),
        "exemplars (still stored) added per tool, UTC day and tier; a label written again (a "
        "usage label seen again, or one replaced by a stronger tier) counts on its latest day",
        "cumulative_lines",
        order=lambda r: (r[1], r[0], r[2]),
    ),
    Analysis(
        "cold_tools",
        ("tool",),
        "tools never ranked first, never used and never labelled",
        "namespace_counts",
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
        "per UTC day: turns, share flagged, share of flagged turns escalated to the teacher "
        "tier (called or not: with the teacher off or its budget spent they end declined or "
        "limit_reached, as oracle_usage shows)",
        "rate_lines",
        order=lambda r: r[0],
        rounding={"flagged_rate": 4, "escalation_rate": 4},
    ),
    Analysis(
        "online_recall",
        (
            "day",
            "pack",
            "used_tool",
            "turns",
            "shown",
            "recall",
            "fallbacks",
            "ignored",
            "unknown_ids",
            "other_pack",
        ),
        "per UTC day, pack and used tool, turns whose search id is known: how many showed the "
        "used tool (recall), and the rest as fallback tools or other tools not shown; plus "
        "turns with unknown or other-pack search ids",
        "recall_lines",
        order=lambda r: (r[0], _nulls_last(r[1]), r[2]),
        rounding={"recall": 4},
    ),
    Analysis(
        "tool_pairs",
        ("a", "b", "together"),
        "pairs of catalog tools used together in one turn, and in how many turns (all turns "
        "recorded: since does not apply; each tool keeps its top 100 counts)",
        "bars",
        order=lambda r: (-r[2], r[0], r[1]),
    ),
    Analysis(
        "tool_transitions",
        ("src", "dst", "count", "share"),
        "per tool used in a turn of a session, the tools of the session's next turn: steps and "
        "their share of the tool's steps kept (all turns recorded: since does not apply; each "
        "tool keeps its top 100 counts)",
        "bars",
        order=lambda r: (r[0], -r[2], r[1]),
        rounding={"share": 4},
    ),
)
ANALYSES: Mapping[str, Analysis] = {a.name: a for a in _ALL}
NAMES: tuple[str, ...] = tuple(ANALYSES)

# Not a store analysis: the fit the learning loop holds in memory, served beside them by the
# API, the CLI and the MCP server under this name (so no analysis may take it).
LEARNING = "learning"


def get_analysis(name: str) -> Analysis:
    """The analysis called `name`; `NotFound` names the known ones."""
    try:
        return ANALYSES[name]
    except KeyError:
        raise NotFound(
            f"no analysis named {shown(name)}; known: {', '.join(NAMES)}", "name"
        ) from None


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
