// $rows: [{node, names}]; names is the turn's `used_tools` JSON text parsed by the caller.
UNWIND $rows AS row
MATCH (t:Turn) WHERE elementId(t) = row.node
SET t.used_names = row.names
RETURN count(t) AS updated
