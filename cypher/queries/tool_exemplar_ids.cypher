MATCH (e:ToolSelectionExample)-[:SELECTS]->(:Tool {name: $name})
RETURN e.id AS id
