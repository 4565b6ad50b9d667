MATCH (t:Tool {tenant: $tenant, name: $name})
OPTIONAL MATCH (t)-[:IN_PACK]->(p:Pack)
RETURN t {.*} AS tool, collect(p.name) AS packs
