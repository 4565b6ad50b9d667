"""The SQLite store's exemplars: saving a batch under the label and retention rules, lookups,
the delta replicas poll, and removal with tombstones.

Functions here run on the store's worker thread, on the connection it owns; the rules they apply
are `toolselect.store.rules`'s, shared with the Neo4j store.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime

from toolselect.errors import StoreError
from toolselect.records import Exemplar, ExemplarDelta, Retention, SaveResult
from toolselect.store.rules import (
    RetentionPlan,
    StoredLabel,
    exemplar_from_row,
    exemplar_row,
    plan_saves,
    recount_row,
    retention_plan,
)
from toolselect.store.sqlite.schema import BUMP_EXEMPLAR, NO_STATE, bump, dt, transaction, ts

_INSERT = """
    INSERT INTO exemplars (id, query, query_norm, tool, tier, embedder, embedding, confidence,
        created_at, turn_id, version, count)
    VALUES (:id, :query, :query_norm, :tool, :tier, :embedder, :embedding, :confidence,
        :created_at, :turn_id, :version, :count)"""
_TOMBSTONE = """
    INSERT INTO exemplar_tombstones (query_norm, version) VALUES (?, ?)
    ON CONFLICT(query_norm) DO UPDATE SET version = excluded.version"""
# Batches look keys up one by one (a cached statement, an index seek each): `IN (...)` lists
# would need SQL built from the batch size, and `json_each` arrays cut text at NUL characters.
_TOOL_EXISTS = "SELECT 1 FROM tools WHERE name = ?"
_LABEL_OF_QUERY = """
    SELECT tool, tier, count, id, turn_id, created_at FROM exemplars WHERE query_norm = ?"""
_RECOUNT = """
    UPDATE exemplars SET count = :count, created_at = :created_at, version = :version,
        turn_id = :turn_id
    WHERE query_norm = :query_norm"""
_EXEMPLAR_OF_QUERY = "SELECT * FROM exemplars WHERE query_norm = ?"
# The three steps of a `RetentionPlan`, newest first as `newest_first` orders; the exempt tiers
# come as a JSON array (tier names hold no NUL).
_EXPIRED = """
    SELECT query_norm FROM exemplars
    WHERE tier NOT IN (SELECT value FROM json_each(:exempt)) AND created_at < :cutoff"""
_BEYOND_TOOL_CAP = """
    SELECT query_norm FROM exemplars
    WHERE tool = :tool AND tier NOT IN (SELECT value FROM json_each(:exempt))
    ORDER BY created_at DESC, version DESC, id DESC LIMIT -1 OFFSET :per_tool"""
_BEYOND_TOTAL_CAP = """
    SELECT query_norm FROM exemplars WHERE tier NOT IN (SELECT value FROM json_each(:exempt))
    ORDER BY created_at DESC, version DESC, id DESC LIMIT -1 OFFSET :total"""
_OF_TOOL = "SELECT * FROM exemplars WHERE tool = ? ORDER BY created_at DESC, version DESC, id DESC"


def _row(conn: sqlite3.Connection, sql: str, key: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(sql, (key,)).fetchone()
    return row


def _exemplar(row: sqlite3.Row) -> Exemplar:
    return exemplar_from_row(dict(row), dt)


def tombstone(conn: sqlite3.Connection, query_norms: Sequence[str]) -> None:
    """Record removed queries under one fresh exemplar version."""
    version = bump(conn, BUMP_EXEMPLAR)
    conn.executemany(_TOMBSTONE, [(qn, version) for qn in query_norms])


def save(
    conn: sqlite3.Connection,
    exemplars: Sequence[Exemplar],
    limits: Retention,
    now: datetime,
    replayed: bool,
) -> SaveResult:
    """`Store.save_exemplars` in one transaction: the save rules, the writes, then retention."""
    keys = sorted({e.query_norm for e in exemplars})
    names = sorted({e.tool for e in exemplars})
    with transaction(conn):
        known = {name for name in names if _row(conn, _TOOL_EXISTS, name) is not None}
        stored = {
            key: StoredLabel(
                row["tool"],
                row["tier"],
                row["count"],
                row["id"],
                row["turn_id"],
                dt(row["created_at"]),
            )
            for key in keys
            if (row := _row(conn, _LABEL_OF_QUERY, key)) is not None
        }
        plan = plan_saves(exemplars, stored, known, replayed=replayed)
        if not plan.changing:
            return plan.result()
        version = bump(conn, BUMP_EXEMPLAR)
        written = plan.written
        rows = [(e.query_norm,) for e in written]
        conn.executemany("DELETE FROM exemplars WHERE query_norm = ?", rows)
        conn.executemany(_INSERT, [exemplar_row(e, ts, version) for e in written])
        conn.executemany(_RECOUNT, [recount_row(e, ts, version) for e in plan.recounts])
        # The upsert supersedes an earlier removal of the same query.
        conn.executemany("DELETE FROM exemplar_tombstones WHERE query_norm = ?", rows)
        # Only counts moved (no row added): no cap can be exceeded; expiry waits for the next
        # batch that adds a label, or the upkeep's pass (`expire`).
        victims = _evict(conn, retention_plan(limits, now, plan.tools)) if written else []
        conn.executemany(_TOMBSTONE, [(qn, version) for qn in victims])
    return plan.result(version, len(victims))


def expire(conn: sqlite3.Connection, limits: Retention, now: datetime) -> int:
    """`Store.expire_exemplars`: the retention pass without a save, in one transaction; the
    exemplar version moves (with the tombstones) only when it evicted something."""
    with transaction(conn):
        victims = _evict(conn, retention_plan(limits, now, ()))
        if victims:
            tombstone(conn, victims)
    return len(victims)


def _evict(conn: sqlite3.Connection, plan: RetentionPlan) -> list[str]:
    """Run the retention plan's steps in order; the normalised queries it deleted, for the
    caller's tombstones."""
    common: dict[str, object] = {"exempt": json.dumps(plan.exempt)}
    selections: list[tuple[str, dict[str, object]]] = [
        (_EXPIRED, common | {"cutoff": ts(plan.cutoff)})
    ]
    selections += [
        (_BEYOND_TOOL_CAP, common | {"tool": tool, "per_tool": plan.per_tool})
        for tool in plan.tools
    ]
    selections.append((_BEYOND_TOTAL_CAP, common | {"total": plan.total}))
    victims: list[str] = []
    for sql, args in selections:
        found = [row[0] for row in conn.execute(sql, args)]
        conn.executemany("DELETE FROM exemplars WHERE query_norm = ?", [(q,) for q in found])
        victims.extend(found)
    return victims


def by_queries(conn: sqlite3.Connection, keys: Sequence[str]) -> dict[str, Exemplar]:
    """The stored exemplars of normalised queries, keyed by them; misses are absent."""
    return {
        key: _exemplar(row)
        for key in keys
        if (row := _row(conn, _EXEMPLAR_OF_QUERY, key)) is not None
    }


def for_tool(conn: sqlite3.Connection, tool: str) -> list[Exemplar]:
    """A tool's exemplars, newest first (the order retention keeps them in)."""
    rows = conn.execute(_OF_TOOL, (tool,))
    return [_exemplar(row) for row in rows]


def since(conn: sqlite3.Connection, version: int) -> ExemplarDelta:
    """Exemplars written and queries removed after `version`."""
    # One read transaction, so the delta and its version describe the same snapshot.
    conn.execute("BEGIN")
    try:
        current = conn.execute("SELECT exemplar_version FROM meta").fetchone()
        upserted = conn.execute(
            "SELECT * FROM exemplars WHERE version > ? ORDER BY version", (version,)
        ).fetchall()
        deleted = conn.execute(
            "SELECT query_norm FROM exemplar_tombstones WHERE version > ? "
            "ORDER BY version, query_norm",
            (version,),
        ).fetchall()
    finally:
        conn.execute("COMMIT")
    if current is None:
        raise StoreError(NO_STATE)
    return ExemplarDelta(
        version=int(current[0]),
        upserted=tuple(_exemplar(row) for row in upserted),
        deleted=tuple(row[0] for row in deleted),
    )


def delete(conn: sqlite3.Connection, exemplar_id: str) -> bool:
    """Remove one exemplar, leaving a tombstone; whether it existed."""
    with transaction(conn):
        row = conn.execute(
            "DELETE FROM exemplars WHERE id = ? RETURNING query_norm", (exemplar_id,)
        ).fetchone()
        if row is None:
            return False
        tombstone(conn, [row[0]])
    return True
