// Every write that moves a version starts here: the no-op SET takes the Meta node's write lock,
// which serialises those transactions so versions are strictly monotonic and unique.
MERGE (m:Meta {key: 'state'})
  ON CREATE SET m.catalog_version = 0, m.exemplar_version = 0
SET m.exemplar_version = m.exemplar_version
RETURN m.catalog_version AS catalog_version, m.exemplar_version AS exemplar_version
