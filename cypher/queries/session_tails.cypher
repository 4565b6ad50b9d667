// $sessions: session ids, sorted. Takes each session's write lock (held until the transaction
// ends; in this order, so two writers of one session wait for each other instead of
// deadlocking), then returns each stored session's last turn, that turn's catalog tools and
// its time (what the next new turn of the session links to and counts transitions from, unless
// older). A session new to the store is created here, so its lock holds too, and returns no row.
UNWIND $sessions AS id
MERGE (s:Session {tenant: $tenant, id: id})
SET s._lock = true
REMOVE s._lock
WITH s
WHERE s.last_turn IS NOT NULL
OPTIONAL MATCH (last:Turn {tenant: $tenant, id: s.last_turn})
RETURN s.id AS session, s.last_turn AS turn, s.last_tools AS tools, last.at AS at
