// oracle_usage: what did each oracle tier decide for flagged turns, and what did the teacher cost?
// Parameters: $since - ISO-8601 datetime string or null (all time); counts flagged turns with
//   at >= $since and their (:OracleCall) nodes with at >= $since.
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// Columns: tier, result (either may be null), decisions (flagged turns), teacher_calls (OracleCall
//   nodes the turns ESCALATED to), input_tokens, output_tokens, cost_usd (the calls' costs added
//   smallest first, so every store gets the same float; toolselect rounds it to 6 places),
//   latency_p50_ms, latency_p95_ms (nearest rank over the calls' latency_ms: the value at index
//   ceil(p * n) - 1 of the sorted list, which is what percentileDisc computes; null without calls).
// Order: tier, then result (nulls last).
MATCH (t:Turn {tenant: $tenant})
WHERE t.flagged AND ($since IS NULL OR t.at >= datetime($since))
WITH t.tier AS tier, t.result AS result, collect(t) AS turns
CALL (turns) {
  UNWIND turns AS t
  MATCH (t)-[:ESCALATED]->(c:OracleCall {tenant: $tenant})
  WHERE $since IS NULL OR c.at >= datetime($since)
  WITH c
  ORDER BY c.cost_usd
  RETURN
    count(c) AS teacher_calls,
    sum(c.input_tokens) AS input_tokens,
    sum(c.output_tokens) AS output_tokens,
    reduce(total = 0.0, cost IN collect(c.cost_usd) | total + cost) AS cost_usd,
    percentileDisc(c.latency_ms, 0.5) AS latency_p50_ms,
    percentileDisc(c.latency_ms, 0.95) AS latency_p95_ms
}
RETURN
  tier,
  result,
  size(turns) AS decisions,
  teacher_calls,
  input_tokens,
  output_tokens,
  cost_usd,
  latency_p50_ms,
  latency_p95_ms
ORDER BY tier, result
