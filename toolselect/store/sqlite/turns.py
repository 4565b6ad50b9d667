"""The SQL of the SQLite store's turns table: the writes of `record_turns`, the reads of the
turns a process looks for (the session fit's, the teacher's unfinished or refused ones), and
their retention (`delete_before`)."""

from __future__ import annotations

import sqlite3

from toolselect.records import TurnsDeleted
from toolselect.store.sqlite import sessions as sqlite_sessions
from toolselect.store.sqlite.schema import transaction

INSERT_TURN = """
    INSERT INTO turns (id, request, used_tool, at, agent_id, pack, outcome, top1, margin,
        flagged, flag_reason, tier, label, result, session_id, used_tools, search_id,
        search_status, shown_position, shown_k, reason)
    VALUES (:id, :request, :used_tool, :at, :agent_id, :pack, :outcome, :top1, :margin,
        :flagged, :flag_reason, :tier, :label, :result, :session_id, :used_tools, :search_id,
        :search_status, :shown_position, :shown_k, :reason)
    ON CONFLICT(id) DO NOTHING"""
UPDATE_TURN = """
    UPDATE turns SET request = :request, used_tool = :used_tool, at = :at, agent_id = :agent_id,
        pack = :pack, outcome = :outcome, top1 = :top1, margin = :margin, flagged = :flagged,
        flag_reason = :flag_reason, tier = :tier, label = :label, result = :result,
        session_id = :session_id, used_tools = :used_tools, search_id = :search_id,
        search_status = :search_status, shown_position = :shown_position, shown_k = :shown_k,
        reason = :reason
    WHERE id = :id"""
SESSION_TURNS = """
    SELECT * FROM turns WHERE session_id IS NOT NULL ORDER BY at DESC, id DESC LIMIT ?"""
UNDECIDED_TURNS = """
    SELECT * FROM turns WHERE tier = 'teacher' AND result IS NULL AND at < ?
    ORDER BY at, id LIMIT ?"""
# ?1 before, ?2 the end of a budget's refusal (`records.BUDGET_SPENT`), ?3 limit. Served by the
# partial index `turns_refused`; a teacher call traced for the turn (`oracle_calls_turn`) means
# it was asked about since.
REFUSED_TURNS = """
    SELECT * FROM turns WHERE result = 'limit_reached' AND tier = 'teacher' AND at < ?1
        AND substr(reason, -length(?2)) = ?2
        AND NOT EXISTS (SELECT 1 FROM oracle_calls c WHERE c.turn_id = turns.id)
    ORDER BY at DESC, id DESC LIMIT ?3"""
# Retention: at most ?2 rows observed (traced) before ?1, which the `at` indexes seek; which
# of them goes first does not matter, every one goes.
_DELETE_TURNS = """
    DELETE FROM turns WHERE id IN (SELECT id FROM turns WHERE at < ?1 LIMIT ?2) RETURNING id"""
_DELETE_CALLS = """
    DELETE FROM oracle_calls WHERE id IN (SELECT id FROM oracle_calls WHERE at < ?1 LIMIT ?2)"""


def delete_before(conn: sqlite3.Connection, before: str, limit: int) -> TurnsDeleted:
    """`Store.delete_turns` (`before` as `ts` writes it) in one transaction: the turns, their
    session links and the sessions they were the last turn of (`sessions.forget_turns`), and
    the teacher calls. Labels keep their `turn_id`, the tool counts their counts."""
    with transaction(conn):
        ids = [row[0] for row in conn.execute(_DELETE_TURNS, (before, limit))]
        sessions = sqlite_sessions.forget_turns(conn, ids) if ids else 0
        calls = conn.execute(_DELETE_CALLS, (before, limit)).rowcount
    return TurnsDeleted(len(ids), max(calls, 0), sessions)
