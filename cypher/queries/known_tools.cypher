// $names: tool names as reported; $bares: their bare names (after the last `__`). The catalog
// tools of those names or bare names: what resolves each reported name (`names.CatalogNames`).
CALL () {
  MATCH (t:Tool {tenant: $tenant})
  WHERE t.name IN $names
  RETURN t.name AS name
  UNION
  MATCH (t:Tool {tenant: $tenant})
  WHERE t.bare_name IN $bares
  RETURN t.name AS name
}
RETURN collect(name) AS names
