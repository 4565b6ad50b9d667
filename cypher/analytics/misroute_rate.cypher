// misroute_rate: how often is each tool's use flagged as a mis-route, and why?
// Parameters: $since - ISO-8601 datetime string or null (all time); counts turns with at >= $since.
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// Columns: used_tool, turns (turns that used it), flagged (of those, flagged),
//   rate (flagged / turns; toolselect rounds it to 4 places, here it is unrounded),
//   top_reason (most frequent flag_reason among its flagged turns, ties by name; null if none).
// Order: flagged descending, then used_tool.
MATCH (t:Turn {tenant: $tenant})
WHERE $since IS NULL OR t.at >= datetime($since)
WITH
  t.used_tool AS used_tool,
  count(t) AS turns,
  count(CASE WHEN t.flagged THEN 1 END) AS flagged,
  collect(CASE WHEN t.flagged THEN t.flag_reason END) AS reasons
CALL (reasons) {
  UNWIND reasons AS reason
  WITH reason, count(*) AS times
  ORDER BY times DESC, reason
  RETURN collect(reason)[0] AS top_reason
}
RETURN used_tool, turns, flagged, toFloat(flagged) / turns AS rate, top_reason
ORDER BY flagged DESC, used_tool
