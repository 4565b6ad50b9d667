"""The analyses of `cypher/analytics/*.cypher` in SQL, for the embedded store.

Each function returns the raw rows the Cypher file returns (same columns, same exact values:
ints, unrounded float ratios, cost sums added smallest first, nearest-rank percentiles), which
`toolselect.analytics.finish` then rounds and orders for both stores alike. Called on the
SQLite store's worker thread; `since` is the store's fixed-width UTC timestamp text or None,
`fallbacks` the configured fallback tools (`TOOLSELECT_FALLBACK_TOOLS`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Mapping
from typing import Any

from toolselect.analytics.registry import nearest_rank, ordered_sum
from toolselect.names import CatalogNames, fallback_name

Row = tuple[Any, ...]

# `:since IS NULL OR at >= :since`: timestamps are fixed-width ISO-8601 UTC text, so text order
# is time order. Ratios divide REALs, as Cypher's toFloat(a) / b does: the same IEEE doubles.
# Per reported name (and flag reason): `_misroute_rate` adds up the names of one catalog tool.
_MISROUTE_COUNTS = """
    SELECT used_tool, flagged AND flag_reason IS NOT NULL, flag_reason, COUNT(*), SUM(flagged)
    FROM turns WHERE :since IS NULL OR at >= :since
    GROUP BY used_tool, flagged AND flag_reason IS NOT NULL, flag_reason"""

_CONFUSIONS = """
    SELECT used_tool, label, COUNT(*) FROM turns
    WHERE flagged AND label IS NOT NULL AND label != used_tool
        AND (:since IS NULL OR at >= :since)
    GROUP BY used_tool, label"""

_DECISIONS = """
    SELECT tier, result, COUNT(*) FROM turns
    WHERE flagged AND (:since IS NULL OR at >= :since)
    GROUP BY tier, result"""

_CALLS = """
    SELECT t.tier, t.result, c.input_tokens, c.output_tokens, c.cost_usd, c.latency_ms
    FROM turns t JOIN oracle_calls c ON c.turn_id = t.id
    WHERE t.flagged AND (:since IS NULL OR (t.at >= :since AND c.at >= :since))"""

_EXEMPLAR_GROWTH = """
    SELECT tool, substr(created_at, 1, 10) AS day, tier, COUNT(*) FROM exemplars
    WHERE :since IS NULL OR created_at >= :since
    GROUP BY tool, day, tier"""

# Every name a turn or label pointed at; `_cold_tools` resolves them as the learner does.
_POINTED_AT = """
    SELECT top1 FROM turns WHERE top1 IS NOT NULL AND (:since IS NULL OR at >= :since)
    UNION SELECT used_tool FROM turns WHERE :since IS NULL OR at >= :since
    UNION SELECT value FROM turns, json_each(turns.used_tools)
        WHERE used_tools IS NOT NULL AND (:since IS NULL OR at >= :since)
    UNION SELECT tool FROM exemplars WHERE :since IS NULL OR created_at >= :since"""

_LABELLED_TURNS = """
    SELECT request, label, tier, COUNT(*) FROM turns
    WHERE flagged AND label IS NOT NULL AND (:since IS NULL OR at >= :since)
    GROUP BY request, label, tier"""

_DRIFT = """
    SELECT substr(at, 1, 10) AS day, COUNT(*) AS turns,
        CAST(SUM(flagged) AS REAL) / COUNT(*),
        CASE SUM(flagged) WHEN 0 THEN 0.0
            ELSE CAST(SUM(flagged AND tier IS 'teacher') AS REAL) / SUM(flagged) END
    FROM turns WHERE :since IS NULL OR at >= :since
    GROUP BY day"""

# `IS` and `IS NOT` compare NULL as a value, as Cypher's coalesce(flag_reason, '') does above.
_ONLINE_RECALL = """
        SELECT substr(at, 1, 10) AS day, pack, used_tool,
            SUM(search_status IN ('shown', 'not_shown')) AS turns,
            SUM(search_status = 'shown') AS shown,
            SUM(search_status = 'not_shown' AND flag_reason IS 'fallback') AS fallbacks,
            SUM(search_status = 'not_shown' AND flag_reason IS NOT 'fallback') AS ignored,
            SUM(search_status = 'unknown') AS unknown_ids,
            SUM(search_status = 'other_pack') AS other_pack
        FROM turns
        WHERE search_status IN ('shown', 'not_shown', 'unknown', 'other_pack')
            AND (:since IS NULL OR at >= :since)
        GROUP BY day, pack, used_tool"""

# Aggregated over all turns recorded (`sessions.py`): `since` does not apply, as in the Cypher.
_TOOL_PAIRS = "SELECT a, b, count FROM tool_pairs"

_TOOL_TRANSITIONS = """
    SELECT src, dst, count, CAST(count AS REAL) / SUM(count) OVER (PARTITION BY src)
    FROM tool_transitions"""


def _rows(sql: str) -> Callable[[sqlite3.Connection, dict[str, Any]], list[Row]]:
    def run(conn: sqlite3.Connection, params: dict[str, Any]) -> list[Row]:
        return [tuple(row) for row in conn.execute(sql, params)]

    return run


def _oracle_usage(conn: sqlite3.Connection, params: dict[str, Any]) -> list[Row]:
    calls: dict[tuple[Any, Any], list[sqlite3.Row]] = {}
    for call in conn.execute(_CALLS, params):
        calls.setdefault((call[0], call[1]), []).append(call)
    rows: list[Row] = []
    for tier, result, decisions in conn.execute(_DECISIONS, params):
        mine = calls.get((tier, result), [])
        latencies = [c[5] for c in mine]
        rows.append(
            (
                tier,
                result,
                decisions,
                len(mine),
                sum(int(c[2]) for c in mine),
                sum(int(c[3]) for c in mine),
                ordered_sum(c[4] for c in mine),
                nearest_rank(latencies, 0.5),
                nearest_rank(latencies, 0.95),
            )
        )
    return rows


def _catalog_tool(conn: sqlite3.Connection, params: dict[str, Any]) -> Callable[[str], str]:
    """The catalog tool a reported name stands for (`CatalogNames.resolve`), else the fallback
    tool it is (`fallback_name`), else the name: the analyses count a tool once, however agents
    name it (`mcp__jira__create_issue`, `mcp__shell_exec`)."""
    names = CatalogNames(row[0] for row in conn.execute("SELECT name FROM tools"))
    fallbacks = params["fallbacks"]
    return lambda name: names.resolve(name) or fallback_name(name, fallbacks) or name


def _misroute_rate(conn: sqlite3.Connection, params: dict[str, Any]) -> list[Row]:
    """Turns and flagged turns per catalog tool; its most frequent flag reason (ties by name)."""
    tool = _catalog_tool(conn, params)
    counts: dict[str, list[int]] = {}
    reasons: dict[str, dict[str, int]] = {}
    for used, has_reason, reason, turns, flagged in conn.execute(_MISROUTE_COUNTS, params):
        name = tool(used)
        total = counts.setdefault(name, [0, 0])
        total[0] += turns
        total[1] += flagged
        if has_reason:
            mine = reasons.setdefault(name, {})
            mine[reason] = mine.get(reason, 0) + turns
    return [
        (name, turns, flagged, flagged / turns, _top(reasons.get(name, {})))
        for name, (turns, flagged) in counts.items()
    ]


def _top(counts: Mapping[str, int]) -> str | None:
    return min(counts, key=lambda reason: (-counts[reason], reason)) if counts else None


def _confusions(conn: sqlite3.Connection, params: dict[str, Any]) -> list[Row]:
    """Per catalog tool used and label: a label for the very tool used, under whatever name the
    agent reported it, is no confusion."""
    tool = _catalog_tool(conn, params)
    pairs: dict[tuple[str, str], int] = {}
    for used, label, turns in conn.execute(_CONFUSIONS, params):
        if (name := tool(used)) != label:
            pairs[(name, label)] = pairs.get((name, label), 0) + turns
    return [(used, label, turns) for (used, label), turns in pairs.items()]


def _online_recall(conn: sqlite3.Connection, params: dict[str, Any]) -> list[Row]:
    """Per day, pack and catalog tool used: the counts of its names added up."""
    tool = _catalog_tool(conn, params)
    groups: dict[tuple[Any, Any, str], list[int]] = {}
    for day, pack, used, *counts in conn.execute(_ONLINE_RECALL, params):
        total = groups.setdefault((day, pack, tool(used)), [0] * len(counts))
        for i, count in enumerate(counts):
            total[i] += count
    return [
        (*key, turns, shown, None if turns == 0 else shown / turns, *rest)
        for key, (turns, shown, *rest) in groups.items()
    ]


def _cold_tools(conn: sqlite3.Connection, params: dict[str, Any]) -> list[Row]:
    """Tools no name pointed at, a name standing for its tool as `CatalogNames.resolve` says
    (agents may report `mcp__server__tool` for the catalog's `server__tool`)."""
    catalog = [row[0] for row in conn.execute("SELECT name FROM tools")]
    names = CatalogNames(catalog)
    seen = {names.resolve(row[0]) for row in conn.execute(_POINTED_AT, params)}
    return [(name,) for name in catalog if name not in seen]


def _label_conflicts(conn: sqlite3.Connection, params: dict[str, Any]) -> list[Row]:
    """One row per exact request, as the Cypher file returns (merging is shared, in finish)."""
    labels: dict[str, set[str]] = {}
    tiers: dict[str, set[str]] = {}
    turns: dict[str, int] = {}
    for request, label, tier, count in conn.execute(_LABELLED_TURNS, params):
        labels.setdefault(request, set()).add(label)
        tiers.setdefault(request, set())
        if tier is not None:  # Cypher's collect() skips nulls
            tiers[request].add(tier)
        turns[request] = turns.get(request, 0) + count
    return [(q, sorted(labels[q]), sorted(tiers[q]), n) for q, n in turns.items()]


_ANALYSES: Mapping[str, Callable[[sqlite3.Connection, dict[str, Any]], list[Row]]] = {
    "misroute_rate": _misroute_rate,
    "confusions": _confusions,
    "oracle_usage": _oracle_usage,
    "exemplar_growth": _rows(_EXEMPLAR_GROWTH),
    "cold_tools": _cold_tools,
    "label_conflicts": _label_conflicts,
    "drift": _rows(_DRIFT),
    "online_recall": _online_recall,
    "tool_pairs": _rows(_TOOL_PAIRS),
    "tool_transitions": _rows(_TOOL_TRANSITIONS),
}


def raw_rows(
    conn: sqlite3.Connection, name: str, since: str | None, fallback_tools: Collection[str]
) -> list[Row]:
    """The raw rows of analysis `name`, read in one transaction (one consistent snapshot)."""
    run = _ANALYSES[name]
    conn.execute("BEGIN")
    try:
        return run(conn, {"since": since, "fallbacks": tuple(fallback_tools)})
    finally:
        conn.execute("COMMIT")
