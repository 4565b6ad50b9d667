// What turns recorded for the first time add (`store/session_rules.plan_sessions`), in the transaction
// that recorded them: $links [{session, prev, turn}] give (:Session)-[:HAS]->(:Turn) and
// (prev)-[:NEXT]->(turn); $tails [{session, turn, tools}] each session's last turn;
// $pairs [{a, b, count}] (a < b) add to (:Tool)-[:USED_WITH]->(:Tool); $transitions
// [{src, dst, count}] add to (:Tool)-[:FOLLOWED_BY]->(:Tool); both set `seen` to $seen (the time
// of the batch's latest turn), which retention keeps first among equal counts. Only catalog
// tools are passed.
CALL () {
  UNWIND $links AS link
  MATCH (t:Turn {tenant: $tenant, id: link.turn})
  MERGE (s:Session {tenant: $tenant, id: link.session})
  MERGE (s)-[:HAS]->(t)
  WITH t, link
  WHERE link.prev IS NOT NULL
  MATCH (p:Turn {tenant: $tenant, id: link.prev})
  MERGE (p)-[:NEXT]->(t)
}
CALL () {
  UNWIND $tails AS tail
  MERGE (s:Session {tenant: $tenant, id: tail.session})
  SET s.last_turn = tail.turn, s.last_tools = tail.tools
}
CALL () {
  UNWIND $pairs AS pair
  MATCH (a:Tool {tenant: $tenant, name: pair.a}), (b:Tool {tenant: $tenant, name: pair.b})
  MERGE (a)-[r:USED_WITH]->(b)
  ON CREATE SET r.count = pair.count, r.seen = datetime($seen)
  ON MATCH SET r.count = r.count + pair.count, r.seen = datetime($seen)
}
CALL () {
  UNWIND $transitions AS step
  MATCH (a:Tool {tenant: $tenant, name: step.src}), (b:Tool {tenant: $tenant, name: step.dst})
  MERGE (a)-[r:FOLLOWED_BY]->(b)
  ON CREATE SET r.count = step.count, r.seen = datetime($seen)
  ON MATCH SET r.count = r.count + step.count, r.seen = datetime($seen)
}
RETURN 1 AS done
