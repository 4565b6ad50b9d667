// confusions: which tool did agents use when the oracle says another one was right?
// Parameters: $since - ISO-8601 datetime string or null (all time); counts turns with at >= $since.
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// $fallbacks - the fallback tools (TOOLSELECT_FALLBACK_TOOLS), each once: a used tool the catalog
//   lacks counts as the one it is (`mcp__shell_exec` is `shell_exec`).
//   In Neo4j Browser: :param fallbacks => ['shell_exec', 'shell_poll', 'shell_kill', 'fs_read',
//   'fs_glob', 'fs_grep', 'skill', 'text_response']
// Columns: used_tool, label (the labelled tool), turns (flagged turns with that pair).
// Only flagged turns with a label for another tool count; a used tool is the catalog tool its
// reported name stands for (`names.CatalogNames`: `mcp__jira__create_issue` is
// `jira__create_issue`, while `github__create_issue` is another tool), else the fallback tool it
// is (`mcp__shell_exec` is `shell_exec`), so a label for the very tool used is no confusion, and
// one tool is one row however agents name it.
// Order: turns descending, then used_tool, then label.
MATCH (t:Turn {tenant: $tenant})
WHERE t.flagged
  AND t.label IS NOT NULL
  AND t.label <> t.used_tool
  AND ($since IS NULL OR t.at >= datetime($since))
WITH t.used_tool AS reported, t.label AS label, count(t) AS turns
CALL (reported) {
  // The catalog tool a reported name stands for (`names.CatalogNames`), else the fallback tool
  // it is (`names.fallback_name`: `mcp__shell_exec` is `shell_exec`), else the name itself.
  OPTIONAL MATCH (exact:Tool {tenant: $tenant, name: reported})
  OPTIONAL MATCH (same:Tool {tenant: $tenant, bare_name: reverse(split(reverse(reported), '__')[0])})
  WITH exact, collect(same.name) AS found
  WITH exact, found, [n IN found WHERE reported ENDS WITH '__' + n] AS within,
    [f IN $fallbacks WHERE f <> ''
      AND (reported = f OR reported ENDS WITH '__' + f OR f ENDS WITH '__' + reported)] AS fallbacks
  WITH exact, found, within, fallbacks, [f IN fallbacks WHERE reported ENDS WITH '__' + f] AS under
  RETURN coalesce(
    exact.name,
    CASE
      WHEN size(found) = 1 THEN found[0]
      WHEN size(within) > 0
        THEN reduce(best = within[0], n IN within | CASE WHEN size(n) > size(best) THEN n ELSE best END)
    END,
    CASE
      WHEN reported IN fallbacks THEN reported
      WHEN size(under) > 0
        THEN reduce(best = under[0], f IN under | CASE WHEN size(f) > size(best) THEN f ELSE best END)
      WHEN size(fallbacks) = 1 THEN fallbacks[0]
    END,
    reported
  ) AS used_tool
}
WITH used_tool, label, sum(turns) AS turns
WHERE used_tool <> label
RETURN used_tool, label, turns
ORDER BY turns DESC, used_tool, label
