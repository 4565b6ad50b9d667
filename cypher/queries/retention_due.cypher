// Whether the retention pass of a store without a save (`Store.expire_exemplars`: the
// RetentionPlan of $cutoff and $total with no tool's cap, over the tiers not in $exempt) would
// evict anything: a label older than $cutoff, or more than $total labels. Run under the state
// lock, so the exemplar version moves only when evict_exemplars has something to evict.
CALL () {
  OPTIONAL MATCH (e:ToolSelectionExample {tenant: $tenant})
  WHERE e.created_at < $cutoff AND NOT e.tier IN $exempt
  WITH e
  LIMIT 1
  RETURN e IS NOT NULL AS expired
}
CALL () {
  MATCH (e:ToolSelectionExample {tenant: $tenant})
  WHERE NOT e.tier IN $exempt
  RETURN count(e) > $total AS over
}
RETURN expired OR over AS due
