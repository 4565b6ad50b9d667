// $turns: property maps of turns none of which is stored yet, with distinct ids; `at` is an ISO
// 8601 string (the driver's own DateTime encoding costs ~0.3 ms a turn in Python). The fast path
// of record_turns: CREATE without MERGE's locking seek, and the Turn(tenant, id) uniqueness constraint
// refuses the whole batch when an id exists after all (a resend, or another replica racing),
// and the caller then runs record_turns instead. Exemplars and oracle calls recorded before
// their turn are linked here through turn_id.
UNWIND $turns AS row
CREATE (t:Turn)
SET t = row, t.tenant = $tenant, t.at = datetime(row.at)
WITH t
CALL (t) {
  MATCH (tool:Tool {tenant: $tenant, name: t.used_tool})
  CREATE (t)-[:USED]->(tool)
}
CALL (t) {
  MATCH (e:ToolSelectionExample {tenant: $tenant, turn_id: t.id})
  MERGE (t)-[:PRODUCED]->(e)
}
CALL (t) {
  MATCH (c:OracleCall {tenant: $tenant, turn_id: t.id})
  MERGE (t)-[:ESCALATED]->(c)
}
RETURN count(t) AS created
