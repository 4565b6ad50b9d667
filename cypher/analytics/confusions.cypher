// confusions: which tool did agents use when the oracle says another one was right?
// Parameters: $since - ISO-8601 datetime string or null (all time); counts turns with at >= $since.
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// Columns: used_tool, label (the labelled tool), turns (flagged turns with that pair).
// Only flagged turns with a label for another tool count: a label the used tool is under more
// namespaces (`mcp__jira__create_issue` for `jira__create_issue`), or the other way round, is
// the same tool (`names.same_tool`); `github__create_issue` and `jira__create_issue` are two.
// Order: turns descending, then used_tool, then label.
MATCH (t:Turn {tenant: $tenant})
WHERE t.flagged
  AND t.label IS NOT NULL
  AND t.label <> t.used_tool
  AND NOT t.label ENDS WITH '__' + t.used_tool
  AND NOT t.used_tool ENDS WITH '__' + t.label
  AND ($since IS NULL OR t.at >= datetime($since))
RETURN t.used_tool AS used_tool, t.label AS label, count(t) AS turns
ORDER BY turns DESC, used_tool, label
