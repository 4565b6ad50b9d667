// Removes the tool with its IN_PACK, SELECTS and USED edges; exemplars are tombstoned first.
MATCH (t:Tool {tenant: $tenant, name: $name})
DETACH DELETE t
RETURN count(*) AS deleted
