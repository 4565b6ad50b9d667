"""The SQLite store's sessions and tool counts: what recording new turns adds, by the rules of
`store/session_rules.plan_sessions` (the Neo4j store applies the same ones as a graph).

Tables: `sessions` (each session's last turn and its catalog tools), `turn_next` (a turn and the
turn of its session before it), `tool_pairs` (a < b: turns that used both) and
`tool_transitions` (src -> dst: a turn of a session used src, its next turn dst).

Functions here run inside the caller's transaction, on the store's worker thread.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from toolselect.names import CatalogNames
from toolselect.records import Retention, Turn
from toolselect.store.session_rules import (
    SessionTail,
    catalog_lookup,
    plan_sessions,
    touches_sessions,
    turn_tools,
)
from toolselect.store.sqlite.times import dt, ts

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS sessions (
        id TEXT PRIMARY KEY, last_turn TEXT NOT NULL, last_tools TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS turn_next (
        next TEXT PRIMARY KEY, prev TEXT NOT NULL)""",
    # A deleted turn's link to the turn after it, and the session it was the last turn of
    # (`forget_turns`).
    "CREATE INDEX IF NOT EXISTS turn_next_prev ON turn_next(prev)",
    "CREATE INDEX IF NOT EXISTS sessions_last_turn ON sessions(last_turn)",
    """CREATE TABLE IF NOT EXISTS tool_pairs (
        a TEXT NOT NULL, b TEXT NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (a, b))""",
    """CREATE TABLE IF NOT EXISTS tool_transitions (
        src TEXT NOT NULL, dst TEXT NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (src, dst))""",
)

_PAIR = """INSERT INTO tool_pairs (a, b, count, seen) VALUES (?, ?, ?, ?)
    ON CONFLICT(a, b) DO UPDATE SET count = count + excluded.count, seen = excluded.seen"""
_TRANSITION = """INSERT INTO tool_transitions (src, dst, count, seen) VALUES (?, ?, ?, ?)
    ON CONFLICT(src, dst) DO UPDATE SET count = count + excluded.count, seen = excluded.seen"""
_TAIL = """INSERT INTO sessions (id, last_turn, last_tools) VALUES (?, ?, ?)
    ON CONFLICT(id) DO UPDATE SET last_turn = excluded.last_turn,
        last_tools = excluded.last_tools"""

# Retention of turns (`forget_turns`): a deleted turn's links to its session's turns before and
# after it (Neo4j's NEXT edges), and the sessions it was the last turn of.
_DELETE_LINKS = """
    DELETE FROM turn_next WHERE next IN (SELECT value FROM json_each(?1))
        OR prev IN (SELECT value FROM json_each(?1))"""
_DELETE_SESSIONS = "DELETE FROM sessions WHERE last_turn IN (SELECT value FROM json_each(?1))"

# Retention (`session_rules.kept_relations`): each tool's top counts, by count, then the most
# recently counted (`seen`, fixed-width text; NULL, from a file before it, sorts last), then the
# other's name (BINARY collation: code-point order, as Python sorts).
_PRUNE_TRANSITIONS = """
    DELETE FROM tool_transitions WHERE (src, dst) IN (
        SELECT src, dst FROM (
            SELECT src, dst,
                ROW_NUMBER() OVER (PARTITION BY src ORDER BY count DESC, seen DESC, dst) AS place
            FROM tool_transitions)
        WHERE place > ?)"""
_PRUNE_PAIRS = """
    DELETE FROM tool_pairs WHERE (a, b) IN (
        SELECT a, b FROM (
            SELECT a, b,
                ROW_NUMBER() OVER (PARTITION BY tool ORDER BY count DESC, seen DESC, other) AS place
            FROM (SELECT a AS tool, b AS other, a, b, count, seen FROM tool_pairs
                UNION ALL SELECT b, a, a, b, count, seen FROM tool_pairs))
        GROUP BY a, b HAVING MIN(place) > ?)"""


def stored_ids(conn: sqlite3.Connection, ids: Sequence[str]) -> set[str]:
    """Which of `ids` are stored turns (read before the batch is written)."""
    found = conn.execute(
        "SELECT id FROM turns WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(ids),)
    )
    return {row[0] for row in found}


def read_tails(conn: sqlite3.Connection, sessions: Sequence[str]) -> dict[str, SessionTail]:
    """The last recorded turn of each of `sessions` that has one."""
    rows = conn.execute(
        "SELECT s.id, s.last_turn, s.last_tools, t.at FROM sessions s "
        "LEFT JOIN turns t ON t.id = s.last_turn "
        "WHERE s.id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(sessions)),),
    )
    return {
        row[0]: SessionTail(
            row[1], tuple(json.loads(row[2])), None if row[3] is None else dt(row[3])
        )
        for row in rows
    }


def record(conn: sqlite3.Connection, new_turns: Sequence[Turn], limits: Retention) -> None:
    """Link the turns recorded for the first time to their sessions (a session idle past
    `limits.session_idle_s` starting afresh) and count their tools, then keep
    `limits.relations_per_tool` counts per tool (`session_rules.kept_relations`)."""
    if not touches_sessions(new_turns):
        return
    sessions = sorted({t.session_id for t in new_turns if t.session_id is not None})
    tails = read_tails(conn, sessions)
    names, bares = catalog_lookup(
        [name for t in new_turns for name in turn_tools(t)]
        + [name for tail in tails.values() for name in tail.tools]
    )
    rows = conn.execute(
        "SELECT name FROM tools WHERE name IN (SELECT value FROM json_each(?)) "
        "OR bare_name IN (SELECT value FROM json_each(?))",
        (json.dumps(names), json.dumps(bares)),
    )
    known = CatalogNames(row[0] for row in rows)
    plan = plan_sessions(new_turns, tails, known, idle_s=limits.session_idle_s)
    keep = limits.relations_per_tool
    conn.executemany(
        "INSERT OR IGNORE INTO turn_next (next, prev) VALUES (?, ?)",
        [(turn_id, prev) for _, prev, turn_id in plan.links if prev is not None],
    )
    seen = ts(max(t.at for t in new_turns))  # when these counts were last seen, for retention
    conn.executemany(_PAIR, [(a, b, n, seen) for (a, b), n in sorted(plan.pairs.items())])
    steps = sorted(plan.transitions.items())
    conn.executemany(_TRANSITION, [(s, d, n, seen) for (s, d), n in steps])
    if plan.pairs or plan.transitions:
        conn.execute(_PRUNE_TRANSITIONS, (max(keep, 0),))
        conn.execute(_PRUNE_PAIRS, (max(keep, 0),))
    conn.executemany(
        _TAIL,
        [(s, t.turn_id, json.dumps(list(t.tools))) for s, t in sorted(plan.tails.items())],
    )


def forget_tool(conn: sqlite3.Connection, name: str) -> None:
    """A deleted tool's counts go with it (as its relationships do in Neo4j)."""
    conn.execute("DELETE FROM tool_pairs WHERE a = ? OR b = ?", (name, name))
    conn.execute("DELETE FROM tool_transitions WHERE src = ? OR dst = ?", (name, name))


def forget_turns(conn: sqlite3.Connection, ids: Sequence[str]) -> int:
    """What deleted turns (`turns.delete_before`) leave behind goes with them: their links, and
    the sessions whose last turn they were, expired for good (`session_rules.session_expired`:
    a tail without a time); a session's next turn starts it afresh without one as with one.
    How many sessions went. A session's last turn is its newest (`plan_sessions`), so no
    session of a kept turn is among them."""
    conn.execute(_DELETE_LINKS, (json.dumps(list(ids)),))
    return max(conn.execute(_DELETE_SESSIONS, (json.dumps(list(ids)),)).rowcount, 0)
