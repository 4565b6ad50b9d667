// $links: [{tool, pack}], distinct pairs; returns how many memberships are new.
UNWIND $links AS link
MATCH (t:Tool {name: link.tool})
MERGE (p:Pack {name: link.pack})
WITH t, p, EXISTS { (t)-[:IN_PACK]->(p) } AS had
MERGE (t)-[:IN_PACK]->(p)
RETURN count(CASE WHEN had THEN null ELSE 1 END) AS added
