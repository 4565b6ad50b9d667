// The start of save_exemplars: take the Meta write lock (as lock_meta does) and read what the
// save rules need: which of $tools exist, and the labels $keys have now.
MERGE (m:Meta {tenant: $tenant, key: 'state'})
  ON CREATE SET m.catalog_version = 0, m.exemplar_version = 0
SET m._lock = true
WITH m
REMOVE m._lock
WITH m
CALL () {
  UNWIND $tools AS name
  MATCH (t:Tool {tenant: $tenant, name: name})
  RETURN collect(t.name) AS known
}
CALL () {
  UNWIND $keys AS key
  MATCH (e:ToolSelectionExample {tenant: $tenant, query_key: key})-[:SELECTS]->(t:Tool)
  RETURN collect({query_norm: e.query_norm, tier: e.tier, tool: t.name, count: e.count, id: e.id, turn_id: e.turn_id, created_at: e.created_at}) AS stored
}
RETURN m.exemplar_version AS exemplar_version, known, stored
