// tenant_exists: whether tenant $tenant has any node in the graph (its state record, which its
// store's migrate() writes, or any of its data), creating none; a read. Each label is asked by
// the leading property of its per-tenant uniqueness constraint with the second one IS NOT NULL,
// which makes it an index seek of at most one entry (a bare {tenant: $tenant} is a label scan
// over every tenant's nodes); the first label that answers ends it.
// Returns: exists (boolean).
RETURN EXISTS { MATCH (m:Meta) WHERE m.tenant = $tenant AND m.key IS NOT NULL }
    OR EXISTS { MATCH (t:Tool) WHERE t.tenant = $tenant AND t.name IS NOT NULL }
    OR EXISTS { MATCH (t:Turn) WHERE t.tenant = $tenant AND t.id IS NOT NULL }
    OR EXISTS { MATCH (e:ToolSelectionExample) WHERE e.tenant = $tenant AND e.id IS NOT NULL }
    OR EXISTS { MATCH (c:OracleCall) WHERE c.tenant = $tenant AND c.id IS NOT NULL }
    OR EXISTS { MATCH (s:Session) WHERE s.tenant = $tenant AND s.id IS NOT NULL }
    OR EXISTS { MATCH (p:Pack) WHERE p.tenant = $tenant AND p.name IS NOT NULL }
    OR EXISTS {
      MATCH (ts:ExemplarTombstone) WHERE ts.tenant = $tenant AND ts.query_key IS NOT NULL
    }
    AS exists
