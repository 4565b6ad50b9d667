MATCH (e:ToolSelectionExample {query_norm: $query_norm})-[:SELECTS]->(t:Tool)
RETURN e {.*} AS exemplar, t.name AS tool
