// Turns that used several tools, written before `used_names` existed (migrate() backfills
// them): `used_tools` is JSON text, which Cypher cannot read, so the caller parses it.
MATCH (t:Turn)
WHERE t.used_tools IS NOT NULL AND t.used_names IS NULL
RETURN elementId(t) AS node, t.used_tools AS used_tools
LIMIT 10000
