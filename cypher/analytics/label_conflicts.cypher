// label_conflicts: which requests were given different labels on different turns?
// Parameters: $since - ISO-8601 datetime string or null (all time); counts turns with at >= $since.
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// Columns: query, labels (distinct labels), tiers (distinct tiers that labelled), turns.
// One row per exact request text among flagged turns with a label. Here, a row with more than
// one label is a conflict. toolselect then merges the rows whose requests normalise alike
// (toolselect.names.normalise_query: NFKC, case-folded, whitespace collapsed; Cypher's toLower
// and trim cannot reproduce it, nor can SQLite's ASCII-only lower), reports the normalised text
// as `query` with sorted lists, and keeps the groups with more than one label, most turns first.
MATCH (t:Turn {tenant: $tenant})
WHERE t.flagged AND t.label IS NOT NULL AND ($since IS NULL OR t.at >= datetime($since))
RETURN
  t.request AS query,
  collect(DISTINCT t.label) AS labels,
  collect(DISTINCT t.tier) AS tiers,
  count(t) AS turns
ORDER BY size(labels) DESC, turns DESC, query
