// Deletes exemplars by id, leaving one tombstone per normalised query at $version so
// exemplars_since() can report the deletion.
UNWIND $ids AS id
MATCH (e:ToolSelectionExample {tenant: $tenant, id: id})
MERGE (ts:ExemplarTombstone {tenant: $tenant, query_key: e.query_key})
SET ts.version = $version, ts.query_norm = e.query_norm
DETACH DELETE e
RETURN count(*) AS deleted
