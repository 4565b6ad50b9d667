// confusions: which tool did agents use when the oracle says another one was right?
// Parameters: $since - ISO-8601 datetime string or null (all time); counts turns with at >= $since.
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// Columns: used_tool, label (the labelled tool), turns (flagged turns with that pair).
// Only flagged turns with a label for another tool count: a label whose bare name (the part
// after the last `__`) is the used tool's is the same tool reported under another prefix.
// Order: turns descending, then used_tool, then label.
MATCH (t:Turn {tenant: $tenant})
WHERE t.flagged
  AND t.label IS NOT NULL
  AND reverse(split(reverse(t.label), '__')[0]) <> reverse(split(reverse(t.used_tool), '__')[0])
  AND ($since IS NULL OR t.at >= datetime($since))
RETURN t.used_tool AS used_tool, t.label AS label, count(t) AS turns
ORDER BY turns DESC, used_tool, label
