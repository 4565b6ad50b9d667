// exemplar_growth: how many labels (exemplars) did each tool gain per day, by tier?
// Parameters: $since - ISO-8601 datetime string or null (all time); counts exemplars with
//   created_at >= $since. Only exemplars that still exist count (evicted or undone ones are gone).
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// Columns: tool, day (UTC date of created_at, YYYY-MM-DD), tier, added (exemplars).
// Order: day, then tool, then tier.
MATCH (e:ToolSelectionExample {tenant: $tenant})-[:SELECTS]->(tool:Tool {tenant: $tenant})
WHERE $since IS NULL OR e.created_at >= datetime($since)
RETURN
  tool.name AS tool,
  toString(date(datetime({datetime: e.created_at, timezone: 'Z'}))) AS day,
  e.tier AS tier,
  count(e) AS added
ORDER BY day, tool, tier
