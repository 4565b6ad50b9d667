// $call: the property map. A sequence number from a counter node keeps insertion order for calls
// with equal `at` (the counter is locked before it is read); a resent id keeps its first number.
// Linked to its turn when that turn is already recorded (record_turns links the other case).
MERGE (s:Meta {tenant: $tenant, key: 'oracle_calls'})
  ON CREATE SET s.seq = 0
SET s._lock = true
WITH s
REMOVE s._lock
WITH s
SET s.seq = s.seq + 1
MERGE (c:OracleCall {tenant: $tenant, id: $call.id})
  ON CREATE SET c.seq = s.seq
SET c += $call
WITH c
CALL (c) {
  MATCH (c)<-[r:ESCALATED]-()
  DELETE r
}
CALL (c) {
  MATCH (t:Turn {tenant: $tenant, id: c.turn_id})
  MERGE (t)-[:ESCALATED]->(c)
}
RETURN c.id AS id
