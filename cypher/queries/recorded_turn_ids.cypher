UNWIND $ids AS id
MATCH (t:Turn {tenant: $tenant, id: id})
RETURN t.id AS id
