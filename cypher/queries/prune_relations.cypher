// Retention of the tool counts (`store/session_rules.kept_relations`), after turns added to them: $keep
// (>= 0) per tool by count descending, then the most recently counted (`seen`; none, from before
// it was kept, is oldest), then the other tool's name. A tool's FOLLOWED_BY steps beyond its top
// $keep go; a USED_WITH pair goes when neither of its tools keeps it.
CALL () {
  MATCH (src:Tool {tenant: $tenant})-[r:FOLLOWED_BY]->(dst:Tool)
  WITH src, r, dst
  ORDER BY r.count DESC, coalesce(r.seen, datetime('0001-01-01T00:00:00Z')) DESC, dst.name
  WITH src, collect(r) AS steps
  UNWIND steps[$keep..] AS r
  DELETE r
}
CALL () {
  MATCH (t:Tool {tenant: $tenant})-[r:USED_WITH]-(o:Tool)
  WITH t, r, o
  ORDER BY r.count DESC, coalesce(r.seen, datetime('0001-01-01T00:00:00Z')) DESC, o.name
  WITH t, collect(r) AS rs
  UNWIND range(0, size(rs) - 1) AS place
  WITH rs[place] AS r, place
  WITH r, min(place) AS best
  WHERE best >= $keep
  DELETE r
}
RETURN 1 AS done
