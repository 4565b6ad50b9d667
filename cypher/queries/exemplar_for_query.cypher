MATCH (e:ToolSelectionExample {query_key: $query_key})-[:SELECTS]->(t:Tool)
RETURN e {.*} AS exemplar, t.name AS tool
