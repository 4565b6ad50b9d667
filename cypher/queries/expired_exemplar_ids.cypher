// Retention by age; human feedback never expires.
MATCH (e:ToolSelectionExample)
WHERE e.created_at < $cutoff AND e.tier <> 'feedback'
RETURN e.id AS id
