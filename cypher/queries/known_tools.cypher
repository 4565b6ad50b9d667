// $names: tool names. Those in the catalog.
MATCH (t:Tool)
WHERE t.name IN $names
RETURN collect(t.name) AS names
