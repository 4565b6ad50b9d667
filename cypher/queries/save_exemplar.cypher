// $exemplar: the full property map (query_norm included); replaces every field and edge.
MATCH (tool:Tool {name: $tool})
MERGE (e:ToolSelectionExample {query_key: $exemplar.query_key})
SET e = $exemplar
WITH e, tool
CALL (e) {
  MATCH (e)-[r:SELECTS|PRODUCED]-()
  DELETE r
}
// The new label supersedes an earlier removal of the same query.
CALL (e) {
  MATCH (ts:ExemplarTombstone {query_key: e.query_key})
  DELETE ts
}
MERGE (e)-[:SELECTS]->(tool)
WITH e
CALL (e) {
  MATCH (turn:Turn {id: e.turn_id})
  MERGE (turn)-[:PRODUCED]->(e)
}
RETURN e.version AS version
