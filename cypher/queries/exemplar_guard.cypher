// What save_exemplar needs to decide: does the tool exist, and what label does the query have.
OPTIONAL MATCH (tool:Tool {name: $tool})
OPTIONAL MATCH (e:ToolSelectionExample {query_key: $query_key})-[:SELECTS]->(old:Tool)
RETURN tool IS NOT NULL AS tool_exists, e.tier AS tier, old.name AS tool
