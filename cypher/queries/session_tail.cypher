// $id: a session id. Its last recorded turn, that turn's catalog tools and its time, as
// session_tails returns them, without taking the session's lock (a ranking reads it); no row
// when no turn of the session is recorded.
MATCH (s:Session {tenant: $tenant, id: $id})
WHERE s.last_turn IS NOT NULL
OPTIONAL MATCH (last:Turn {tenant: $tenant, id: s.last_turn})
RETURN s.id AS session, s.last_turn AS turn, s.last_tools AS tools, last.at AS at
