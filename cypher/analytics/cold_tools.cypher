// cold_tools: which catalog tools has nothing ever pointed at?
// A tool is cold when no turn ranked it first (top1), no turn used it (used_tool, or any of its
// used_names: the tools of a turn that used several) and no exemplar selects it (it was never
// labelled). A name no tool has stands for the one tool with its bare name, the part after the
// last `__` (agents may report `mcp__server__tool` for `server__tool`), or when several have it
// for the longest the name ends with after a `__` (`names.CatalogNames`, as the learner reads it).
// Parameters: $since - ISO-8601 datetime string or null (all time); only turns with
//   at >= $since and exemplars with created_at >= $since count as pointing at a tool.
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// Columns: tool. Order: tool.
CALL () {
  MATCH (t:Turn {tenant: $tenant})
  WHERE $since IS NULL OR t.at >= datetime($since)
  UNWIND [t.top1, t.used_tool] + coalesce(t.used_names, []) AS name
  WITH DISTINCT name
  WHERE name IS NOT NULL
  RETURN collect(name) AS named
}
CALL () {
  MATCH (e:ToolSelectionExample {tenant: $tenant})-[:SELECTS]->(labelled:Tool {tenant: $tenant})
  WHERE $since IS NULL OR e.created_at >= datetime($since)
  RETURN collect(DISTINCT labelled.name) AS labelled
}
CALL (named) {
  UNWIND named AS name
  OPTIONAL MATCH (exact:Tool {tenant: $tenant, name: name})
  WITH name, exact
  WHERE exact IS NULL
  MATCH (tool:Tool {tenant: $tenant, bare_name: reverse(split(reverse(name), '__')[0])})
  WITH name, collect(tool.name) AS found
  WITH found, [t IN found WHERE name ENDS WITH '__' + t] AS within
  WITH CASE
      WHEN size(found) = 1 THEN found[0]
      WHEN size(within) > 0
        THEN reduce(best = within[0], t IN within | CASE WHEN size(t) > size(best) THEN t ELSE best END)
    END AS tool
  WHERE tool IS NOT NULL
  RETURN collect(DISTINCT tool) AS resolved
}
MATCH (tool:Tool {tenant: $tenant})
WHERE NOT tool.name IN named AND NOT tool.name IN labelled AND NOT tool.name IN resolved
RETURN tool.name AS tool
ORDER BY tool
