// Range indexes for the reads and joins the store and the analytics queries make. Lookups by a
// key within a tenant use the constraints' composite indexes; these serve the rest (each read
// also matches the tenant, which filters the few rows an index seek finds).
// A tenant's turns by time (session_turns, the analyses' `since`).
CREATE INDEX turn_tenant_at IF NOT EXISTS FOR (t:Turn) ON (t.tenant, t.at);
// A tenant's teacher-tier turns by time (undecided_turns).
CREATE INDEX turn_tenant_tier_at IF NOT EXISTS FOR (t:Turn) ON (t.tenant, t.tier, t.at);
// A tenant's tools by bare name (known_tools resolves a reported name by it).
CREATE INDEX tool_tenant_bare_name IF NOT EXISTS FOR (t:Tool) ON (t.tenant, t.bare_name);
CREATE INDEX turn_at IF NOT EXISTS FOR (t:Turn) ON (t.at);
CREATE INDEX turn_used_tool IF NOT EXISTS FOR (t:Turn) ON (t.used_tool);
CREATE INDEX exemplar_version IF NOT EXISTS FOR (e:ToolSelectionExample) ON (e.version);
CREATE INDEX exemplar_created_at IF NOT EXISTS FOR (e:ToolSelectionExample) ON (e.created_at);
// Turns recorded after their exemplars or oracle calls link to them through turn_id.
CREATE INDEX exemplar_turn_id IF NOT EXISTS FOR (e:ToolSelectionExample) ON (e.turn_id);
CREATE INDEX tombstone_version IF NOT EXISTS FOR (ts:ExemplarTombstone) ON (ts.version);
CREATE INDEX oracle_call_at IF NOT EXISTS FOR (c:OracleCall) ON (c.at);
CREATE INDEX oracle_call_turn_id IF NOT EXISTS FOR (c:OracleCall) ON (c.turn_id);
