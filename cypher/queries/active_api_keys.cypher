// active_api_keys: every key not revoked, of every tenant (what the key registry loads),
// oldest first.
MATCH (k:ApiKey)
WHERE k.revoked_at IS NULL
RETURN k {.*} AS key
ORDER BY k.created_at, k.id
