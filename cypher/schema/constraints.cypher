// Unique constraints (Community edition: no existence or node-key constraints).
// Each also backs a range index, so lookups by these keys are index seeks.
CREATE CONSTRAINT tool_name IF NOT EXISTS FOR (t:Tool) REQUIRE t.name IS UNIQUE;
CREATE CONSTRAINT pack_name IF NOT EXISTS FOR (p:Pack) REQUIRE p.name IS UNIQUE;
CREATE CONSTRAINT turn_id IF NOT EXISTS FOR (t:Turn) REQUIRE t.id IS UNIQUE;
CREATE CONSTRAINT exemplar_id IF NOT EXISTS FOR (e:ToolSelectionExample) REQUIRE e.id IS UNIQUE;
CREATE CONSTRAINT exemplar_query_norm IF NOT EXISTS
  FOR (e:ToolSelectionExample) REQUIRE e.query_norm IS UNIQUE;
CREATE CONSTRAINT tombstone_query_norm IF NOT EXISTS
  FOR (ts:ExemplarTombstone) REQUIRE ts.query_norm IS UNIQUE;
CREATE CONSTRAINT oracle_call_id IF NOT EXISTS FOR (c:OracleCall) REQUIRE c.id IS UNIQUE;
CREATE CONSTRAINT meta_key IF NOT EXISTS FOR (m:Meta) REQUIRE m.key IS UNIQUE;
