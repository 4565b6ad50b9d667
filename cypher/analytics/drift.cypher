// drift: per day, how many turns were flagged and how many flagged turns needed the teacher?
// Parameters: $since - ISO-8601 datetime string or null (all time); counts turns with at >= $since.
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// Columns: day (UTC date of the turn's at, YYYY-MM-DD), turns,
//   flagged_rate (flagged / turns), escalation_rate (flagged turns with tier 'teacher' / flagged
//   turns; 0.0 on a day without flagged turns). toolselect rounds both rates to 4 places.
// Order: day.
MATCH (t:Turn {tenant: $tenant})
WHERE $since IS NULL OR t.at >= datetime($since)
WITH
  toString(date(datetime({datetime: t.at, timezone: 'Z'}))) AS day,
  count(t) AS turns,
  count(CASE WHEN t.flagged THEN 1 END) AS flagged,
  count(CASE WHEN t.flagged AND t.tier = 'teacher' THEN 1 END) AS escalated
RETURN
  day,
  turns,
  toFloat(flagged) / turns AS flagged_rate,
  CASE flagged WHEN 0 THEN 0.0 ELSE toFloat(escalated) / flagged END AS escalation_rate
ORDER BY day
