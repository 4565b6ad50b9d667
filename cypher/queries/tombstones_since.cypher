MATCH (ts:ExemplarTombstone {tenant: $tenant})
WHERE ts.version > $version
RETURN ts.query_norm AS query_norm
ORDER BY ts.version, ts.query_norm
