// $ids: session ids. Each one's last recorded turn, that turn's catalog tools and its time, as
// session_tails returns them, without taking the sessions' locks (a ranking reads them); no
// row for a session with no turn recorded.
UNWIND $ids AS id
MATCH (s:Session {tenant: $tenant, id: id})
WHERE s.last_turn IS NOT NULL
OPTIONAL MATCH (last:Turn {tenant: $tenant, id: s.last_turn})
RETURN s.id AS session, s.last_turn AS turn, s.last_tools AS tools, last.at AS at
