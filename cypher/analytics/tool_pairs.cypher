// tool_pairs: which tools do agents use together in one turn, and how often?
// Parameters: $since - accepted and not applied: the counts are kept aggregated over all turns
//   recorded (each turn counted once, when first recorded), without the times of their turns;
//   each tool keeps its top 100 counts (`Retention.relations_per_tool`), the rest are dropped.
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// One row per unordered pair of catalog tools used together in at least one turn.
// Columns: a, b (the pair, a < b by name), together (turns that used both).
// Order: together descending, then a, then b.
MATCH (a:Tool {tenant: $tenant})-[r:USED_WITH]->(b:Tool {tenant: $tenant})
RETURN a.name AS a, b.name AS b, r.count AS together
ORDER BY together DESC, a, b
