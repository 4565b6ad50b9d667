// $tools: [{name, namespace, bare_name, description, input_schema, content_hash}], names distinct.
// Only tools whose content hash differs are written; returns how many were.
UNWIND $tools AS row
OPTIONAL MATCH (old:Tool {tenant: $tenant, name: row.name})
WITH row, old IS NULL OR old.content_hash <> row.content_hash AS changed
MERGE (t:Tool {tenant: $tenant, name: row.name})
WITH t, row, changed
WHERE changed
SET t = row, t.tenant = $tenant, t.updated_at = $now
RETURN count(t) AS changed
