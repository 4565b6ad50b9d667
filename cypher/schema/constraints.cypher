// Unique constraints (Community edition: no existence or node-key constraints).
// Each also backs a range index, so lookups by these keys are index seeks.
CREATE CONSTRAINT tool_name IF NOT EXISTS FOR (t:Tool) REQUIRE t.name IS UNIQUE;
CREATE CONSTRAINT pack_name IF NOT EXISTS FOR (p:Pack) REQUIRE p.name IS UNIQUE;
CREATE CONSTRAINT turn_id IF NOT EXISTS FOR (t:Turn) REQUIRE t.id IS UNIQUE;
CREATE CONSTRAINT exemplar_id IF NOT EXISTS FOR (e:ToolSelectionExample) REQUIRE e.id IS UNIQUE;
// Normalised queries are unique by their SHA-256 (`query_key`): a range index refuses keys
// over about 8 KiB. Stores made before query_key drop the query_norm constraints.
DROP CONSTRAINT exemplar_query_norm IF EXISTS;
DROP CONSTRAINT tombstone_query_norm IF EXISTS;
CREATE CONSTRAINT exemplar_query_key IF NOT EXISTS
  FOR (e:ToolSelectionExample) REQUIRE e.query_key IS UNIQUE;
CREATE CONSTRAINT tombstone_query_key IF NOT EXISTS
  FOR (ts:ExemplarTombstone) REQUIRE ts.query_key IS UNIQUE;
CREATE CONSTRAINT oracle_call_id IF NOT EXISTS FOR (c:OracleCall) REQUIRE c.id IS UNIQUE;
CREATE CONSTRAINT meta_key IF NOT EXISTS FOR (m:Meta) REQUIRE m.key IS UNIQUE;
CREATE CONSTRAINT session_id IF NOT EXISTS FOR (s:Session) REQUIRE s.id IS UNIQUE;
// API keys: one node per key, unique by id and by the SHA-256 of the key.
CREATE CONSTRAINT api_key_id IF NOT EXISTS FOR (k:ApiKey) REQUIRE k.id IS UNIQUE;
CREATE CONSTRAINT api_key_hash IF NOT EXISTS FOR (k:ApiKey) REQUIRE k.hash IS UNIQUE;
