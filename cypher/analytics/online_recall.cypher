// online_recall: of the turns that reported a search id, how often was the used tool among the
// tools that search showed (recall@k, k being what each search showed)?
// Parameters: $since - ISO-8601 datetime string or null (all time); counts turns with at >= $since.
//   In Neo4j Browser: :param since => null
// $tenant - the tenant whose data is read (every node matched carries it).
//   In Neo4j Browser: :param tenant => 'default'
// $fallbacks - the fallback tools (TOOLSELECT_FALLBACK_TOOLS), each once: a used tool the catalog
//   lacks counts as the one it is (`mcp__shell_exec` is `shell_exec`).
//   In Neo4j Browser: :param fallbacks => ['shell_exec', 'shell_poll', 'shell_kill', 'fs_read',
//   'fs_glob', 'fs_grep', 'skill', 'text_response']
// One row per UTC day, pack and used tool with at least one turn whose search_status is set
// (turns observed without a search id do not count anywhere here).
// Columns: day (UTC date of the turn's at, YYYY-MM-DD), pack (the turn's pack, null for none),
//   used_tool, turns (turns whose search is known: search_status 'shown' or 'not_shown'),
//   shown (of those, the used tool was among the tools shown),
//   recall (shown / turns, unrounded here, toolselect rounds it to 4 places; null when turns is
//   0, i.e. the group only has unknown or other-pack search ids),
//   fallbacks (not shown, and the used tool is a fallback tool: flag_reason 'fallback'; the agent
//   improvised instead of using a shown tool),
//   ignored (not shown, and not a fallback tool: the agent passed over what was shown for a
//   tool the search did not show), so turns = shown + fallbacks + ignored,
//   unknown_ids (search_status 'unknown': the id was never issued here, expired or forgotten),
//   other_pack (search_status 'other_pack': the search was issued for another pack).
// Whether the right tool was among those shown is not stored, so a fallback can be a miss of
// the ranker or of the agent alike.
// A used tool is the catalog tool its reported name stands for (`names.CatalogNames`), else the
// fallback tool it is (`mcp__shell_exec` is `shell_exec`), so one tool is one row however agents
// name it.
// Order: day, then pack (nulls last), then used_tool.
MATCH (t:Turn {tenant: $tenant})
WHERE t.search_status IN ['shown', 'not_shown', 'unknown', 'other_pack']
  AND ($since IS NULL OR t.at >= datetime($since))
WITH
  toString(date(datetime({datetime: t.at, timezone: 'Z'}))) AS day,
  t.pack AS pack,
  t.used_tool AS reported,
  count(CASE WHEN t.search_status IN ['shown', 'not_shown'] THEN 1 END) AS turns,
  count(CASE WHEN t.search_status = 'shown' THEN 1 END) AS shown,
  count(
    CASE WHEN t.search_status = 'not_shown' AND t.flag_reason = 'fallback' THEN 1 END
  ) AS fallbacks,
  count(
    CASE
      WHEN t.search_status = 'not_shown' AND coalesce(t.flag_reason, '') <> 'fallback' THEN 1
    END
  ) AS ignored,
  count(CASE WHEN t.search_status = 'unknown' THEN 1 END) AS unknown_ids,
  count(CASE WHEN t.search_status = 'other_pack' THEN 1 END) AS other_pack
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
WITH
  day,
  pack,
  used_tool,
  sum(turns) AS turns,
  sum(shown) AS shown,
  sum(fallbacks) AS fallbacks,
  sum(ignored) AS ignored,
  sum(unknown_ids) AS unknown_ids,
  sum(other_pack) AS other_pack
RETURN
  day,
  pack,
  used_tool,
  turns,
  shown,
  CASE turns WHEN 0 THEN null ELSE toFloat(shown) / turns END AS recall,
  fallbacks,
  ignored,
  unknown_ids,
  other_pack
ORDER BY day, pack, used_tool
