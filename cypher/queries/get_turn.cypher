MATCH (t:Turn {id: $id})
RETURN t {.*} AS turn
