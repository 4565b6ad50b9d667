// $rows: [{tool, exemplar}], one row per query_key; `exemplar` is the full property map
// (query_norm and query_key included) and replaces every field and edge of the stored one;
// `created_at` arrives as ISO 8601 text and is stored as a DateTime.
UNWIND $rows AS row
MATCH (tool:Tool {tenant: $tenant, name: row.tool})
MERGE (e:ToolSelectionExample {tenant: $tenant, query_key: row.exemplar.query_key})
SET e = row.exemplar, e.tenant = $tenant, e.created_at = datetime(row.exemplar.created_at)
WITH e, tool
CALL (e) {
  MATCH (e)-[r:SELECTS|PRODUCED]-()
  DELETE r
}
// The new label supersedes an earlier removal of the same query.
CALL (e) {
  MATCH (ts:ExemplarTombstone {tenant: $tenant, query_key: e.query_key})
  DELETE ts
}
MERGE (e)-[:SELECTS]->(tool)
WITH e
CALL (e) {
  MATCH (turn:Turn {tenant: $tenant, id: e.turn_id})
  MERGE (turn)-[:PRODUCED]->(e)
}
RETURN count(e) AS written
