// The end of save_exemplars: one RetentionPlan (toolselect/store/rules.py) over the exemplars
// whose tier is not in $exempt, in order (each step sees what the previous ones removed): older
// than $cutoff; beyond the newest $per_tool of each of $tools; beyond the newest $total overall
// (ties by version, then id), all within tenant $tenant. Every evicted exemplar leaves a tombstone at $version; then the
// exemplar version moves to $version.
CALL () {
  MATCH (e:ToolSelectionExample {tenant: $tenant})
  WHERE e.created_at < $cutoff AND NOT e.tier IN $exempt
  MERGE (ts:ExemplarTombstone {tenant: $tenant, query_key: e.query_key})
  SET ts.version = $version, ts.query_norm = e.query_norm
  DETACH DELETE e
  RETURN count(*) AS expired
}
CALL () {
  UNWIND $tools AS name
  MATCH (t:Tool {tenant: $tenant, name: name})
  WITH t
  WHERE COUNT {
    MATCH (e:ToolSelectionExample)-[:SELECTS]->(t)
    WHERE NOT e.tier IN $exempt
  } > $per_tool
  CALL (t) {
    MATCH (e:ToolSelectionExample)-[:SELECTS]->(t)
    WHERE NOT e.tier IN $exempt
    WITH e
    ORDER BY e.created_at DESC, e.version DESC, e.id DESC
    SKIP $per_tool
    RETURN e
  }
  MERGE (ts:ExemplarTombstone {tenant: $tenant, query_key: e.query_key})
  SET ts.version = $version, ts.query_norm = e.query_norm
  DETACH DELETE e
  RETURN count(*) AS over_tool
}
CALL () {
  CALL () {
    MATCH (e:ToolSelectionExample {tenant: $tenant})
    WHERE NOT e.tier IN $exempt
    RETURN count(e) AS held
  }
  WITH held
  WHERE held > $total
  MATCH (e:ToolSelectionExample {tenant: $tenant})
  WHERE NOT e.tier IN $exempt
  WITH e
  ORDER BY e.created_at DESC, e.version DESC, e.id DESC
  SKIP $total
  MERGE (ts:ExemplarTombstone {tenant: $tenant, query_key: e.query_key})
  SET ts.version = $version, ts.query_norm = e.query_norm
  DETACH DELETE e
  RETURN count(*) AS over_total
}
MATCH (m:Meta {tenant: $tenant, key: 'state'})
SET m.exemplar_version = $version
RETURN expired + over_tool + over_total AS evicted
