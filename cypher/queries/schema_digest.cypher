// The digest of the schema and migration files the database was last migrated by (no row: never,
// by a version that kept none). Not a tenant's data: one node for the database.
MATCH (m:ToolselectSchema {key: 'schema'})
RETURN m.digest AS digest
