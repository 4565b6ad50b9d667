// Turns the teacher tier took up and never finished (a process stopped mid-call), observed
// before $before (ISO 8601), oldest first; at most $limit.
MATCH (t:Turn {tenant: $tenant, tier: 'teacher'})
WHERE t.result IS NULL AND t.at < datetime($before)
RETURN t {.*} AS turn
ORDER BY t.at, t.id
LIMIT $limit
