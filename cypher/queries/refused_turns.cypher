// Turns the spent teacher budget refused that nothing decided since, observed before $before
// (ISO 8601), newest first; at most $limit. Refused by a budget: `limit_reached` with a reason
// ending in $spent (`records.BUDGET_SPENT`; a teacher backlog's says otherwise). Decided since:
// a teacher call traced for the turn means it was asked about again, whatever was recorded.
MATCH (t:Turn {tenant: $tenant, tier: 'teacher'})
WHERE t.result = 'limit_reached' AND t.reason ENDS WITH $spent AND t.at < datetime($before)
  AND NOT EXISTS { MATCH (c:OracleCall {tenant: $tenant, turn_id: t.id}) }
RETURN t {.*} AS turn
ORDER BY t.at DESC, t.id DESC
LIMIT $limit
