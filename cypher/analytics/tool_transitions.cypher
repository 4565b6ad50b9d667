// tool_transitions: after a turn of a session used one tool, which tools did its next turn use?
// Parameters: $since - accepted and not applied: the counts are kept aggregated over all turns
//   recorded (each turn counted once, when first recorded), without the times of their turns;
//   each tool keeps its top 100 counts (`Retention.relations_per_tool`), the rest are dropped.
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// One row per (src -> dst) of catalog tools: a turn of a session used src, the session's next
// turn used dst (src = dst when a tool is used again).
// Columns: src, dst, count (such steps), share (count / all steps from src; unrounded here,
//   toolselect rounds it to 4 places).
// Order: src, then count descending, then dst.
MATCH (src:Tool {tenant: $tenant})-[r:FOLLOWED_BY]->(:Tool {tenant: $tenant})
WITH src, sum(r.count) AS total
MATCH (src)-[r:FOLLOWED_BY]->(dst:Tool {tenant: $tenant})
RETURN src.name AS src, dst.name AS dst, r.count AS count, toFloat(r.count) / total AS share
ORDER BY src, count DESC, dst
