MATCH (e:ToolSelectionExample {tenant: $tenant})-[:SELECTS]->(t:Tool)
WHERE e.version > $version
RETURN e {.*} AS exemplar, t.name AS tool
ORDER BY e.version
