"""The analyses of `cypher/analytics/*.cypher` in SQL, for the embedded store.

Each function returns the raw rows the Cypher file returns (same columns, same exact values:
ints, unrounded float ratios, cost sums added smallest first, nearest-rank percentiles), which
`toolselect.analytics.finish` then rounds and orders for both stores alike. Called on the
SQLite store's worker thread; `since` is the store's fixed-width UTC timestamp text or None.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from toolselect.analytics.registry import nearest_rank, ordered_sum
from toolselect.names import CatalogNames, same_tool

Row = tuple[Any, ...]

# `:since IS NULL OR at >= :since`: timestamps are fixed-width ISO-8601 UTC text, so text order
# is time order. Ratios divide REALs, as Cypher's toFloat(a) / b does: the same IEEE doubles.
_MISROUTE_RATE = """
    WITH t AS (SELECT * FROM turns WHERE :since IS NULL OR at >= :since),
    counts AS (
        SELECT used_tool, COUNT(*) AS turns, SUM(flagged) AS flagged FROM t GROUP BY used_tool),
    reasons AS (
        SELECT used_tool, flag_reason, ROW_NUMBER() OVER (
            PARTITION BY used_tool ORDER BY COUNT(*) DESC, flag_reason) AS place
        FROM t WHERE flagged AND flag_reason IS NOT NULL GROUP BY used_tool, flag_reason)
    SELECT c.used_tool, c.turns, c.flagged, CAST(c.flagged AS REAL) / c.turns, r.flag_reason
    FROM counts c LEFT JOIN reasons r ON r.used_tool = c.used_tool AND r.place = 1"""

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
    SELECT day, pack, used_tool, turns, shown,
        CASE turns WHEN 0 THEN NULL ELSE CAST(shown AS REAL) / turns END,
        fallbacks, ignored, unknown_ids, other_pack
    FROM (
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
        GROUP BY day, pack, used_tool)"""

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


def _confusions(conn: sqlite3.Connection, params: dict[str, Any]) -> list[Row]:
    """A label for the tool the agent used under another prefix is no confusion (`same_tool`)."""
    return [row for row in conn.execute(_CONFUSIONS, params) if not same_tool(row[0], row[1])]


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
    "misroute_rate": _rows(_MISROUTE_RATE),
    "confusions": _confusions,
    "oracle_usage": _oracle_usage,
    "exemplar_growth": _rows(_EXEMPLAR_GROWTH),
    "cold_tools": _cold_tools,
    "label_conflicts": _label_conflicts,
    "drift": _rows(_DRIFT),
    "online_recall": _rows(_ONLINE_RECALL),
    "tool_pairs": _rows(_TOOL_PAIRS),
    "tool_transitions": _rows(_TOOL_TRANSITIONS),
}


def raw_rows(conn: sqlite3.Connection, name: str, since: str | None) -> list[Row]:
    """The raw rows of analysis `name`, read in one transaction (one consistent snapshot)."""
    run = _ANALYSES[name]
    conn.execute("BEGIN")
    try:
        return run(conn, {"since": since})
    finally:
        conn.execute("COMMIT")
