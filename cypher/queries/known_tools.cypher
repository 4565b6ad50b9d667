// $names: tool names. Those in the catalog.
MATCH (t:Tool {tenant: $tenant})
WHERE t.name IN $names
RETURN collect(t.name) AS names
