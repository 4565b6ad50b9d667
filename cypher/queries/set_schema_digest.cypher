// $digest: the digest of the schema and migration files a migration just ran, read back by
// schema_digest.
MERGE (m:ToolselectSchema {key: 'schema'})
SET m.digest = $digest
