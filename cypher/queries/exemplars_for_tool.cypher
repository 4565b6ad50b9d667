MATCH (e:ToolSelectionExample)-[:SELECTS]->(t:Tool {tenant: $tenant, name: $tool})
RETURN e {.*} AS exemplar, t.name AS tool
ORDER BY e.created_at DESC, e.version DESC, e.id DESC
