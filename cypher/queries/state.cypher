OPTIONAL MATCH (m:Meta {tenant: $tenant, key: 'state'})
RETURN coalesce(m.catalog_version, 0) AS catalog_version,
       coalesce(m.exemplar_version, 0) AS exemplar_version
