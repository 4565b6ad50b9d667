// Exemplars and tombstones written before `query_key` existed (migrate() backfills them).
MATCH (n)
WHERE (n:ToolSelectionExample OR n:ExemplarTombstone) AND n.query_key IS NULL
RETURN elementId(n) AS node, n.query_norm AS query_norm
LIMIT 10000
