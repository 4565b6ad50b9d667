// Unique constraints (Community edition: no existence or node-key constraints), per tenant:
// every node of a tenant's data carries `tenant`, and its key is unique within that tenant only.
// Each also backs a composite range index led by tenant, so lookups by these keys are index seeks.
// A tenant's nodes of one label are no prefix seek of it: Neo4j 5 seeks a composite index only
// when each of its properties has a predicate, so `{tenant: $tenant}` alone would scan the label
// across every tenant; indexes.cypher gives each label a tenant index for those reads.
// Stores made before tenants had single-property constraints; migrate() gives their nodes
// tenant 'default' first (`queries/backfill_tenant`), then these drop and replace them.
DROP CONSTRAINT tool_name IF EXISTS;
DROP CONSTRAINT pack_name IF EXISTS;
DROP CONSTRAINT turn_id IF EXISTS;
DROP CONSTRAINT exemplar_id IF EXISTS;
DROP CONSTRAINT exemplar_query_key IF EXISTS;
DROP CONSTRAINT tombstone_query_key IF EXISTS;
DROP CONSTRAINT oracle_call_id IF EXISTS;
DROP CONSTRAINT meta_key IF EXISTS;
DROP CONSTRAINT session_id IF EXISTS;
// Stores made before query_key had query_norm constraints.
DROP CONSTRAINT exemplar_query_norm IF EXISTS;
DROP CONSTRAINT tombstone_query_norm IF EXISTS;
CREATE CONSTRAINT tool_tenant_name IF NOT EXISTS
  FOR (t:Tool) REQUIRE (t.tenant, t.name) IS UNIQUE;
CREATE CONSTRAINT pack_tenant_name IF NOT EXISTS
  FOR (p:Pack) REQUIRE (p.tenant, p.name) IS UNIQUE;
CREATE CONSTRAINT turn_tenant_id IF NOT EXISTS
  FOR (t:Turn) REQUIRE (t.tenant, t.id) IS UNIQUE;
CREATE CONSTRAINT exemplar_tenant_id IF NOT EXISTS
  FOR (e:ToolSelectionExample) REQUIRE (e.tenant, e.id) IS UNIQUE;
// Normalised queries are unique by their SHA-256 (`query_key`): a range index refuses keys
// over about 8 KiB.
CREATE CONSTRAINT exemplar_tenant_query_key IF NOT EXISTS
  FOR (e:ToolSelectionExample) REQUIRE (e.tenant, e.query_key) IS UNIQUE;
CREATE CONSTRAINT tombstone_tenant_query_key IF NOT EXISTS
  FOR (ts:ExemplarTombstone) REQUIRE (ts.tenant, ts.query_key) IS UNIQUE;
CREATE CONSTRAINT oracle_call_tenant_id IF NOT EXISTS
  FOR (c:OracleCall) REQUIRE (c.tenant, c.id) IS UNIQUE;
CREATE CONSTRAINT meta_tenant_key IF NOT EXISTS
  FOR (m:Meta) REQUIRE (m.tenant, m.key) IS UNIQUE;
CREATE CONSTRAINT session_tenant_id IF NOT EXISTS
  FOR (s:Session) REQUIRE (s.tenant, s.id) IS UNIQUE;
// API keys are not a tenant's data (each names its tenant): one node per key, unique by id and
// by the SHA-256 of the key, across tenants.
CREATE CONSTRAINT api_key_id IF NOT EXISTS FOR (k:ApiKey) REQUIRE k.id IS UNIQUE;
CREATE CONSTRAINT api_key_hash IF NOT EXISTS FOR (k:ApiKey) REQUIRE k.hash IS UNIQUE;
// The schema's own record: the digest of the schema and migration files it was made by
// (`store/neo4j/migration.py`), so a reader (the exec selector) skips a migration already made.
CREATE CONSTRAINT toolselect_schema_key IF NOT EXISTS FOR (m:ToolselectSchema) REQUIRE m.key IS UNIQUE;
