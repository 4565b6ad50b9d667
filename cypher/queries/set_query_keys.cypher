// $rows: [{node, key}]; the key is the SHA-256 of query_norm, computed by the caller.
UNWIND $rows AS row
MATCH (n) WHERE elementId(n) = row.node
SET n.query_key = row.key
RETURN count(n) AS updated
