// misroute_rate: how often is each tool's use flagged as a mis-route, and why?
// Parameters: $since - ISO-8601 datetime string or null (all time); counts turns with at >= $since.
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// $fallbacks - the fallback tools (TOOLSELECT_FALLBACK_TOOLS), each once: a used tool the catalog
//   lacks counts as the one it is (`mcp__shell_exec` is `shell_exec`).
//   In Neo4j Browser: :param fallbacks => ['shell_exec', 'shell_poll', 'shell_kill', 'fs_read',
//   'fs_glob', 'fs_grep', 'skill', 'text_response']
// Columns: used_tool, turns (turns that used it), flagged (of those, flagged),
//   rate (flagged / turns; toolselect rounds it to 4 places, here it is unrounded),
//   top_reason (most frequent flag_reason among its flagged turns, ties by name; null if none).
// A used tool is the catalog tool its reported name stands for (`mcp__jira__create_issue` is
// `jira__create_issue`, as the learner reads it), else the fallback tool it is (`mcp__shell_exec`
// is `shell_exec`), so one tool is one row however agents name it.
// Order: flagged descending, then used_tool.
MATCH (t:Turn {tenant: $tenant})
WHERE $since IS NULL OR t.at >= datetime($since)
WITH
  t.used_tool AS reported,
  count(t) AS turns,
  count(CASE WHEN t.flagged THEN 1 END) AS flagged,
  collect(CASE WHEN t.flagged THEN t.flag_reason END) AS reasons
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
WITH used_tool, sum(turns) AS turns, sum(flagged) AS flagged, collect(reasons) AS nested
WITH used_tool, turns, flagged, reduce(every = [], r IN nested | every + r) AS reasons
CALL (reasons) {
  UNWIND reasons AS reason
  WITH reason, count(*) AS times
  ORDER BY times DESC, reason
  RETURN collect(reason)[0] AS top_reason
}
RETURN used_tool, turns, flagged, toFloat(flagged) / turns AS rate, top_reason
ORDER BY flagged DESC, used_tool
