// Retention per tool: the non-feedback exemplars beyond the newest $keep.
MATCH (e:ToolSelectionExample)-[:SELECTS]->(:Tool {name: $tool})
WHERE e.tier <> 'feedback'
WITH e
ORDER BY e.created_at DESC, e.version DESC
SKIP $keep
RETURN e.id AS id
