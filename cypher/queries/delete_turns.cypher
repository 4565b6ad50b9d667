// Retention of turns (`Store.delete_turns`): at most $limit turns observed before $before (ISO
// 8601), with every edge they have (USED, PRODUCED, ESCALATED, HAS, NEXT), and at most $limit
// teacher calls traced before it; which of them go first does not matter, every one goes, so
// nothing is sorted and each seeks its (tenant, at) index. The session a turn was the last of
// goes with it (expired for good: `session_rules.session_expired`, a tail without a time),
// found through the turn's HAS edge, never by reading a tenant's sessions. A session's last
// turn is its newest (`plan_sessions`), so none with a kept turn goes; its lock is taken before
// its last_turn is read again, so one a writer has just moved on to a new turn stays. Labels a
// turn PRODUCED keep their turn_id, the tools their USED_WITH and FOLLOWED_BY counts.
CALL () {
  MATCH (t:Turn {tenant: $tenant})
  WHERE t.at < datetime($before)
  WITH t
  LIMIT $limit
  OPTIONAL MATCH (s:Session)-[:HAS]->(t)
  WHERE s.last_turn = t.id
  WITH t, t.id AS id, s
  DETACH DELETE t
  WITH id, s
  CALL (id, s) {
    WITH id, s
    WHERE s IS NOT NULL
    SET s._lock = true
    REMOVE s._lock
    WITH id, s
    WHERE s.last_turn = id
    DETACH DELETE s
    RETURN count(*) AS session
  }
  RETURN count(*) AS turns, sum(session) AS sessions
}
CALL () {
  MATCH (c:OracleCall {tenant: $tenant})
  WHERE c.at < datetime($before)
  WITH c
  LIMIT $limit
  DETACH DELETE c
  RETURN count(*) AS calls
}
RETURN turns, calls, sessions
