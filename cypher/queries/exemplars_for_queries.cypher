// $keys: query_keys (SHA-256 of normalised queries); one row per stored exemplar found.
UNWIND $keys AS key
MATCH (e:ToolSelectionExample {tenant: $tenant, query_key: key})-[:SELECTS]->(t:Tool)
RETURN e {.*} AS exemplar, t.name AS tool
