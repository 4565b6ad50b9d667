MATCH (m:Meta {tenant: $tenant, key: 'state'})
SET m.catalog_version = m.catalog_version + $catalog,
    m.exemplar_version = m.exemplar_version + $exemplar
RETURN m.catalog_version AS catalog_version, m.exemplar_version AS exemplar_version
