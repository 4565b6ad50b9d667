MATCH (t:Tool)
WHERE $pack IS NULL OR EXISTS { (t)-[:IN_PACK]->(:Pack {name: $pack}) }
OPTIONAL MATCH (t)-[:IN_PACK]->(p:Pack)
RETURN t {.*} AS tool, collect(p.name) AS packs
