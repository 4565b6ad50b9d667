// $links: [{tool, pack}], distinct pairs; returns how many memberships are new.
UNWIND $links AS link
MATCH (t:Tool {tenant: $tenant, name: link.tool})
MERGE (p:Pack {tenant: $tenant, name: link.pack})
WITH t, p, EXISTS { (t)-[:IN_PACK]->(p) } AS had
MERGE (t)-[:IN_PACK]->(p)
RETURN count(CASE WHEN had THEN null ELSE 1 END) AS added
