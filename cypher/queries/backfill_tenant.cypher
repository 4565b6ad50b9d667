// Migration to tenants: every node of a tenant's data stored before tenants existed (no `tenant`
// property) belongs to tenant $tenant ('default'); ApiKey nodes are not a tenant's data. Runs in
// its own transactions of 10000 nodes (an auto-commit query), before the per-tenant constraints
// replace the single-property ones; a second run finds nothing to do.
MATCH (n)
WHERE (n:Tool OR n:Pack OR n:Turn OR n:ToolSelectionExample OR n:ExemplarTombstone
    OR n:OracleCall OR n:Meta OR n:Session)
  AND n.tenant IS NULL
CALL (n) {
  SET n.tenant = $tenant
} IN TRANSACTIONS OF 10000 ROWS
