"""The SQL of the SQLite store's turns table: the writes of `record_turns` and the reads of
the turns a process looks for (the session fit's, the teacher's unfinished or refused ones)."""

from __future__ import annotations

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
