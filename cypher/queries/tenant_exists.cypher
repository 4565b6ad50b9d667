// tenant_exists: whether tenant $tenant has any node in the graph (its state record, which its
// store's migrate() writes, or any of its data), creating none; a read. Each label is asked by
// its tenant index (schema/indexes.cypher), a seek of at most one entry; the first label that
// answers ends it.
// Returns: exists (boolean).
RETURN EXISTS { MATCH (:Meta {tenant: $tenant}) }
    OR EXISTS { MATCH (:Tool {tenant: $tenant}) }
    OR EXISTS { MATCH (:Turn {tenant: $tenant}) }
    OR EXISTS { MATCH (:ToolSelectionExample {tenant: $tenant}) }
    OR EXISTS { MATCH (:OracleCall {tenant: $tenant}) }
    OR EXISTS { MATCH (:Session {tenant: $tenant}) }
    OR EXISTS { MATCH (:Pack {tenant: $tenant}) }
    OR EXISTS { MATCH (:ExemplarTombstone {tenant: $tenant}) }
    AS exists
