// Retention in all: the non-feedback exemplars beyond the newest $keep.
MATCH (e:ToolSelectionExample)
WHERE e.tier <> 'feedback'
WITH e
ORDER BY e.created_at DESC, e.version DESC
SKIP $keep
RETURN e.id AS id
