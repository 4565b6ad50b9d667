// $rows: [{query_key, count, created_at, version, turn_id}]: a usage label seen again keeps its
// node; only its count, time (ISO 8601 text: the latest sighting of its tool, kept by one against
// it, `rules.counted`), version and turn change, and the turn that saw it last is the one linked
// (the graph holds no node or edge per repeat).
UNWIND $rows AS row
MATCH (e:ToolSelectionExample {tenant: $tenant, query_key: row.query_key})
SET e.count = row.count, e.created_at = datetime(row.created_at), e.version = row.version,
    e.turn_id = row.turn_id
WITH e
CALL (e) {
  MATCH (e)<-[r:PRODUCED]-()
  DELETE r
}
CALL (e) {
  MATCH (turn:Turn {tenant: $tenant, id: e.turn_id})
  MERGE (turn)-[:PRODUCED]->(e)
}
RETURN count(e) AS written
