MATCH (t:Tool {tenant: $tenant})
WHERE $pack IS NULL OR EXISTS { (t)-[:IN_PACK]->(:Pack {tenant: $tenant, name: $pack}) }
OPTIONAL MATCH (t)-[:IN_PACK]->(p:Pack)
RETURN t {.*} AS tool, collect(p.name) AS packs
