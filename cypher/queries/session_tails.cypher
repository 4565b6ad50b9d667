// $sessions: session ids. Each stored session's last turn and that turn's catalog tools (what
// the next new turn of the session links to and counts transitions from).
MATCH (s:Session {tenant: $tenant})
WHERE s.id IN $sessions
RETURN s.id AS session, s.last_turn AS turn, s.last_tools AS tools
