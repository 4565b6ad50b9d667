// Range indexes for the reads and joins the store and the analytics queries make. Every index on
// a label of a tenant's data leads with `tenant`: several tenants share the graph, and an index
// (or a label scan) that does not reads every tenant's nodes to find one tenant's, so a small
// tenant would pay for the biggest. Neo4j 5 seeks a composite index only when each of its
// properties has a predicate, so a read of a tenant's nodes by `tenant` alone (a list, an
// analysis) seeks the single-property tenant index of its label; lookups by a key within a
// tenant use the constraints' composite indexes. tests/store/test_tenant_plans.py checks the
// plan of every query against this.
// A tenant's nodes of one label.
CREATE INDEX tool_tenant IF NOT EXISTS FOR (t:Tool) ON (t.tenant);
CREATE INDEX pack_tenant IF NOT EXISTS FOR (p:Pack) ON (p.tenant);
CREATE INDEX turn_tenant IF NOT EXISTS FOR (t:Turn) ON (t.tenant);
CREATE INDEX exemplar_tenant IF NOT EXISTS FOR (e:ToolSelectionExample) ON (e.tenant);
CREATE INDEX tombstone_tenant IF NOT EXISTS FOR (ts:ExemplarTombstone) ON (ts.tenant);
CREATE INDEX oracle_call_tenant IF NOT EXISTS FOR (c:OracleCall) ON (c.tenant);
CREATE INDEX meta_tenant IF NOT EXISTS FOR (m:Meta) ON (m.tenant);
CREATE INDEX session_tenant IF NOT EXISTS FOR (s:Session) ON (s.tenant);
// A tenant's turns by time (session_turns, the analyses' `since`).
CREATE INDEX turn_tenant_at IF NOT EXISTS FOR (t:Turn) ON (t.tenant, t.at);
// A tenant's teacher-tier turns by time (undecided_turns).
CREATE INDEX turn_tenant_tier_at IF NOT EXISTS FOR (t:Turn) ON (t.tenant, t.tier, t.at);
// A tenant's tools by bare name (known_tools resolves a reported name by it).
CREATE INDEX tool_tenant_bare_name IF NOT EXISTS FOR (t:Tool) ON (t.tenant, t.bare_name);
// A tenant's labels and removals since a version (exemplars_since, tombstones_since), its labels
// by age (retention), its oracle calls by time.
CREATE INDEX exemplar_tenant_version IF NOT EXISTS
  FOR (e:ToolSelectionExample) ON (e.tenant, e.version);
CREATE INDEX exemplar_tenant_created_at IF NOT EXISTS
  FOR (e:ToolSelectionExample) ON (e.tenant, e.created_at);
CREATE INDEX tombstone_tenant_version IF NOT EXISTS
  FOR (ts:ExemplarTombstone) ON (ts.tenant, ts.version);
CREATE INDEX oracle_call_tenant_at IF NOT EXISTS FOR (c:OracleCall) ON (c.tenant, c.at);
// Turns recorded after their exemplars or oracle calls link to them through turn_id.
CREATE INDEX exemplar_tenant_turn_id IF NOT EXISTS
  FOR (e:ToolSelectionExample) ON (e.tenant, e.turn_id);
CREATE INDEX oracle_call_tenant_turn_id IF NOT EXISTS FOR (c:OracleCall) ON (c.tenant, c.turn_id);
// Stores made before: single-property indexes that served every tenant's nodes (the ones above
// replace them), and two no query seeks (every read of turns names its tenant; turn_tenant_at
// serves their time).
DROP INDEX turn_at IF EXISTS;
DROP INDEX turn_used_tool IF EXISTS;
DROP INDEX exemplar_version IF EXISTS;
DROP INDEX exemplar_created_at IF EXISTS;
DROP INDEX exemplar_turn_id IF EXISTS;
DROP INDEX tombstone_version IF EXISTS;
DROP INDEX oracle_call_at IF EXISTS;
DROP INDEX oracle_call_turn_id IF EXISTS;
