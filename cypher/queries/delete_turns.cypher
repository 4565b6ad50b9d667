// Retention of turns (`Store.delete_turns`): at most $limit turns observed before $before (ISO
// 8601), with every edge they have (USED, PRODUCED, ESCALATED, HAS, NEXT), and at most $limit
// teacher calls traced before it; which of them go first does not matter, every one goes, so
// nothing is sorted and each seeks its (tenant, at) index. Labels a turn PRODUCED keep their
// turn_id; a Session keeps its last_turn and last_tools, the tools their USED_WITH and
// FOLLOWED_BY counts.
CALL () {
  MATCH (t:Turn {tenant: $tenant})
  WHERE t.at < datetime($before)
  WITH t
  LIMIT $limit
  DETACH DELETE t
  RETURN count(*) AS turns
}
CALL () {
  MATCH (c:OracleCall {tenant: $tenant})
  WHERE c.at < datetime($before)
  WITH c
  LIMIT $limit
  DETACH DELETE c
  RETURN count(*) AS calls
}
RETURN turns, calls
