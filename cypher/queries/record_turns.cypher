// $turns: turn property maps with distinct ids, `at` an ISO 8601 string. A resent id updates the
// turn in place. Returns how many and which turns were new.
// Exemplars and oracle calls recorded before their turn are linked here through turn_id.
UNWIND $turns AS row
OPTIONAL MATCH (old:Turn {tenant: $tenant, id: row.id})
WITH row, old IS NULL AS is_new
MERGE (t:Turn {tenant: $tenant, id: row.id})
SET t = row, t.tenant = $tenant, t.at = datetime(row.at)
WITH t, is_new
CALL (t) {
  MATCH (t)-[u:USED]->(prev:Tool)
  WHERE prev.name <> t.used_tool
  DELETE u
}
CALL (t) {
  MATCH (tool:Tool {tenant: $tenant, name: t.used_tool})
  MERGE (t)-[:USED]->(tool)
}
CALL (t) {
  MATCH (e:ToolSelectionExample {tenant: $tenant, turn_id: t.id})
  MERGE (t)-[:PRODUCED]->(e)
}
CALL (t) {
  MATCH (c:OracleCall {tenant: $tenant, turn_id: t.id})
  MERGE (t)-[:ESCALATED]->(c)
}
RETURN count(CASE WHEN is_new THEN 1 END) AS created,
  collect(CASE WHEN is_new THEN t.id END) AS new_ids
