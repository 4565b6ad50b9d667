// save_api_key: store a new API key ($key: id, hash, prefix, tenant, role, name, created_at,
// revoked_at; never the key itself). The constraints on id and hash refuse a second one.
CREATE (k:ApiKey)
SET k = $key
RETURN k.id AS id
