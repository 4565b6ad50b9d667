// list_api_keys: the keys of tenant $tenant (every tenant's when null), revoked ones too,
// oldest first.
MATCH (k:ApiKey)
WHERE $tenant IS NULL OR k.tenant = $tenant
RETURN k {.*} AS key
ORDER BY k.created_at, k.id
