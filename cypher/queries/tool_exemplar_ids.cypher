MATCH (e:ToolSelectionExample)-[:SELECTS]->(:Tool {tenant: $tenant, name: $name})
RETURN e.id AS id
