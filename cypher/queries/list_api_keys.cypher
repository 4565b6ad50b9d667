// list_api_keys: the keys of tenant $key_tenant (every tenant's when null), revoked ones too,
// oldest first.
MATCH (k:ApiKey)
WHERE $key_tenant IS NULL OR k.tenant = $key_tenant
RETURN k {.*} AS key
ORDER BY k.created_at, k.id
