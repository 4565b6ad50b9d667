MATCH (c:OracleCall {tenant: $tenant})
WHERE ($turn_id IS NULL OR c.turn_id = $turn_id)
  AND ($since IS NULL OR c.at >= datetime($since))
RETURN c {.*} AS call
ORDER BY c.at, c.seq
