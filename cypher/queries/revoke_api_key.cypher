// revoke_api_key: mark the key $id revoked at $now, keeping the time of a first revocation.
// revoked: 1 when the key exists, 0 otherwise.
OPTIONAL MATCH (k:ApiKey {id: $id})
SET k.revoked_at = coalesce(k.revoked_at, $now)
RETURN count(k) AS revoked
