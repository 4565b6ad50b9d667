// Every write that moves a version of tenant $tenant starts here (each tenant has its own). Setting a property takes the Meta node's write
// lock (held to commit), which serialises those transactions; the versions are read only after
// that, so they are current and the versions a transaction assigns are unique and increasing.
// The marker property is removed again at once, so nothing of it is ever committed.
MERGE (m:Meta {tenant: $tenant, key: 'state'})
  ON CREATE SET m.catalog_version = 0, m.exemplar_version = 0
SET m._lock = true
WITH m
REMOVE m._lock
WITH m
RETURN m.catalog_version AS catalog_version, m.exemplar_version AS exemplar_version
