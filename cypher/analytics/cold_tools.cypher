// cold_tools: which catalog tools has nothing ever pointed at?
// A tool is cold when no turn ranked it first (top1), no turn used it (used_tool, or any of its
// used_names: the tools of a turn that used several) and no exemplar selects it (it was never
// labelled).
// Parameters: $since - ISO-8601 datetime string or null (all time); only turns with
//   at >= $since and exemplars with created_at >= $since count as pointing at a tool.
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// Columns: tool. Order: tool.
OPTIONAL MATCH (t:Turn {tenant: $tenant})
WHERE $since IS NULL OR t.at >= datetime($since)
WITH collect(DISTINCT t.top1) + collect(DISTINCT t.used_tool) AS seen,
  collect(t.used_names) AS used_lists
WITH seen + reduce(names = [], used IN used_lists | names + used) AS seen
OPTIONAL MATCH (e:ToolSelectionExample {tenant: $tenant})-[:SELECTS]->(labelled:Tool {tenant: $tenant})
WHERE $since IS NULL OR e.created_at >= datetime($since)
WITH seen, collect(DISTINCT labelled.name) AS labelled_names
WITH seen + labelled_names AS seen
MATCH (tool:Tool {tenant: $tenant})
WHERE NOT tool.name IN seen
RETURN tool.name AS tool
ORDER BY tool
