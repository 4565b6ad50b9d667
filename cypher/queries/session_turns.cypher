// The most recent $limit turns recorded with a session (what the session fit reads), newest
// first; the caller orders them per session.
MATCH (t:Turn {tenant: $tenant})
WHERE t.session_id IS NOT NULL
RETURN t {.*} AS turn
ORDER BY t.at DESC, t.id DESC
LIMIT $limit
