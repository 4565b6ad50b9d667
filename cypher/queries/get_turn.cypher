MATCH (t:Turn {tenant: $tenant, id: $id})
RETURN t {.*} AS turn
