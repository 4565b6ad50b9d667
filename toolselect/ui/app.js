// The toolselect dashboard: reads the JSON API, draws tables and small SVG/HTML charts.
// Plain ES2020, no libraries: the page must work offline and under a strict CSP, so every
// element is built with the DOM API (never innerHTML with data) and styles come from style.css
// or CSSOM properties (inline style attributes would be refused by the CSP).
"use strict";

const KEY = "toolselect.apiKey"; // sessionStorage: gone when the tab closes
const TENANT = "toolselect.tenant"; // the admin's chosen tenant, kept beside the key
// The API's tenant ids (keys.TENANT_PATTERN) and header (keys.TENANT_HEADER).
const TENANT_RE = /^[a-z0-9][a-z0-9_-]{0,62}$/;
const TENANT_HEADER = "X-Toolselect-Tenant";
const DEFAULT_TENANT = "default";
const SVG = "http://www.w3.org/2000/svg";

// Known analyses: title, caption and chart. Analyses the server adds later still get a table.
const ANALYSES = {
  online_recall: {
    title: "Online recall",
    caption:
      "Per UTC day, of the turns whose search id is known: share whose used tool was among the tools shown, and the misses (a fallback tool, or another tool the search did not show).",
    chart: recallChart,
  },
  drift: {
    title: "Mis-route rate over time",
    caption: "Per UTC day: share of turns flagged as mis-routes, and share of flagged turns sent to the teacher.",
    chart: driftChart,
  },
  misroute_rate: {
    title: "Mis-routes per tool",
    caption: "Per tool the agent used: flagged turns / turns, and the most frequent flag reason.",
    chart: misrouteChart,
  },
  confusions: {
    title: "Confusion pairs",
    caption: "Flagged turns where the agent used one tool (rows) and the label says another (columns).",
    chart: confusionChart,
  },
  oracle_usage: {
    title: "Oracle spend by tier",
    caption: "Decisions, teacher calls and cost per oracle tier among flagged turns.",
    chart: oracleChart,
  },
  exemplar_growth: {
    title: "Exemplar growth",
    caption:
      "Exemplars still stored, cumulative per tier (usage: the agent's own successful choices) by the UTC day they were last written.",
    chart: growthChart,
  },
  cold_tools: {
    title: "Cold tools",
    caption: "Tools never ranked first, never used and never labelled.",
    chart: coldChart,
  },
  tool_pairs: {
    title: "Tools used together",
    caption: "Pairs of catalog tools used in one turn, and in how many turns (all turns recorded; each tool keeps its top 100).",
    chart: pairsChart,
  },
  tool_transitions: {
    title: "Tool transitions",
    caption:
      "Per catalog tool used in a turn of a session, the tools the session's next turn used: steps and their share of the tool's steps (all turns recorded; each tool keeps its top 100).",
    chart: transitionsChart,
  },
  label_conflicts: {
    title: "Label conflicts",
    caption: "Requests whose flagged turns got different labels.",
    chart: null,
  },
};
const ORDER = Object.keys(ANALYSES);
// Exemplar tiers weakest first, each with its own colour class whichever tiers a chart holds
// (the PNG charts use the same colours: toolselect/analytics/charts.py, TIER_COLOURS).
const TIERS = { ranker: "s0", usage: "s3", teacher: "s1", feedback: "s2" };

// admin: whether the key may act on any tenant (its role by GET /v1/whoami; null until asked);
// ownTenant: the tenant the key acts on without the header; loads: counts calls of load() so
// that only the latest one draws (a quick tenant switch must not end up showing the earlier
// tenant's data).
const state = { tools: [], counts: new Map(), redraw: [], admin: null, ownTenant: DEFAULT_TENANT, tenants: [], loads: 0 };
// Moved into the analyses' grid on each load, so it is held here rather than looked up.
const learningEl = document.getElementById("card-learning");

// --- the API ---------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field || null;
  }
}

function apiKey() {
  return sessionStorage.getItem(KEY) || "";
}

// The tenant an admin chose ("" for the key's own); a stored value that is not a tenant id is
// never sent.
function chosenTenant() {
  const t = sessionStorage.getItem(TENANT) || "";
  return TENANT_RE.test(t) ? t : "";
}

// The one place requests are built: the key, and the chosen tenant once the key is known to be
// an admin's (a non-admin key never sends the header; `asKey` asks as the key's own tenant).
async function api(method, path, body, asKey = false) {
  const headers = { Accept: "application/json" };
  if (apiKey()) headers.Authorization = "Bearer " + apiKey();
  if (!asKey && state.admin === true && chosenTenant()) headers[TENANT_HEADER] = chosenTenant();
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, "unreachable", "server unreachable: " + err.message);
  }
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch (_) {
    data = null;
  }
  if (!resp.ok) {
    // The API's own error model ({error: {code, message, field}}) when it is there.
    const e = data && data.error ? data.error : { code: "http_" + resp.status, message: text || resp.statusText };
    if (resp.status === 401) askForKey(apiKey() ? "The server refused that key: " + e.message : "");
    throw new ApiError(resp.status, e.code, e.message, e.field);
  }
  return data;
}

function errorText(err) {
  if (!(err instanceof ApiError)) return String(err);
  const where = err.field ? " (" + err.field + ")" : "";
  return err.status ? err.status + " " + err.code + ": " + err.message + where : err.message;
}

// --- small DOM helpers -------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function $(selector) {
  return document.querySelector(selector);
}

function setStatus(text, bad) {
  const s = $("#status");
  s.textContent = text;
  s.classList.toggle("bad", Boolean(bad));
}

function cellText(v) {
  if (v === null || v === undefined) return "–";
  if (Array.isArray(v)) return v.join(", ");
  return String(v);
}

function isNumber(v) {
  return typeof v === "number";
}

function table(columns, rows, opts) {
  opts = opts || {};
  const numeric = columns.map((_, i) => rows.some((r) => isNumber(r[i])) && rows.every((r) => isNumber(r[i]) || r[i] === null));
  const head = el("tr", null, ...columns.map((c, i) => el("th", { class: numeric[i] ? "num" : null, scope: "col", text: c })));
  const body = el("tbody");
  for (const row of rows) {
    const tr = el("tr", opts.rowAttrs ? opts.rowAttrs(row) : null);
    row.forEach((v, i) => tr.append(el("td", { class: numeric[i] ? "num" : null, text: cellText(v) })));
    body.append(tr);
  }
  if (!rows.length) body.append(el("tr", null, el("td", { class: "empty", colspan: columns.length, text: "no rows" })));
  return el("div", { class: "table-wrap" }, el("table", null, el("thead", null, head), body));
}

// items: [{name, cls}], cls a colour class of style.css (s0..s4, bad).
function legend(items) {
  return el("div", { class: "legend" }, ...items.map((it) => el("span", null, el("i", { class: "swatch " + it.cls }), it.name)));
}

function col(result, name) {
  const i = result.columns.indexOf(name);
  return result.rows.map((r) => r[i]);
}

// Draw now and again whenever the window is resized: SVG charts are drawn at the container's
// real width so their text stays readable at phone widths instead of being scaled down.
function drawn(host, draw) {
  const redraw = () => {
    host.replaceChildren();
    draw(host);
  };
  redraw();
  state.redraw.push(redraw);
}

// --- charts --------------------------------------------------------------------------------------

// The smallest of 1, 2, 2.5 or 5 times a power of ten at or above v: round axis ends.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((f) => f * p).find((n) => n >= v - 1e-12);
}

function fmt(v, digits) {
  return Number(v).toFixed(digits).replace(/\.?0+$/, "") || "0";
}

// A line chart: series [{name, ys, cls?}] over xs (numbers), ticks [{x, label}], y from 0 to
// yMax; a series is coloured by its cls (default s<index>); marks are dashed reference lines
// [{axis: "x" | "y", value, label}].
function lineChart(host, o) {
  const W = Math.max(host.clientWidth, 280);
  const H = 220;
  const m = { l: 44, r: 14, t: 12, b: 36 };
  const xs = o.xs;
  let lo = Math.min(...xs);
  let hi = Math.max(...xs);
  if (lo === hi) {
    lo -= 1;
    hi += 1;
  }
  const yMax = o.yMax > 0 ? o.yMax : 1;
  const X = (x) => m.l + ((x - lo) / (hi - lo)) * (W - m.l - m.r);
  const Y = (y) => H - m.b - (y / yMax) * (H - m.t - m.b);
  const root = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": o.label });
  for (let i = 0; i <= 4; i++) {
    const v = (yMax * i) / 4;
    root.append(svg("line", { x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v), class: "grid" }));
    root.append(svg("text", { x: m.l - 6, y: Y(v) + 4, class: "tick", "text-anchor": "end" }, o.yFmt(v)));
  }
  const room = Math.max(1, Math.floor((W - m.l - m.r) / 84));
  const step = Math.ceil(o.ticks.length / room);
  o.ticks.forEach((t, i) => {
    if (i % step !== 0) return;
    // Labels at either end are anchored inwards so they are not cut at the chart's edge.
    const x = X(t.x);
    const anchor = x < m.l + 30 ? "start" : x > W - m.r - 30 ? "end" : "middle";
    root.append(svg("text", { x: anchor === "start" ? x - 4 : anchor === "end" ? x + 4 : x, y: H - m.b + 16, class: "tick", "text-anchor": anchor }, t.label));
  });
  if (o.xTitle) root.append(svg("text", { x: (W + m.l) / 2, y: H - 4, class: "axis", "text-anchor": "middle" }, o.xTitle));
  for (const mark of o.marks || []) {
    const p = mark.axis === "x" ? { x1: X(mark.value), x2: X(mark.value), y1: m.t, y2: H - m.b } : { x1: m.l, x2: W - m.r, y1: Y(mark.value), y2: Y(mark.value) };
    root.append(svg("line", { ...p, class: "mark" }));
    root.append(svg("text", { x: p.x2 - 4, y: p.y1 + 12, class: "mark-label", "text-anchor": "end" }, mark.label));
  }
  const cls = (s, si) => s.cls || "s" + si;
  o.series.forEach((s, si) => {
    const pts = xs.map((x, i) => [X(x), Y(s.ys[i])]).filter((_, i) => s.ys[i] !== null && s.ys[i] !== undefined);
    if (pts.length > 1) root.append(svg("polyline", { points: pts.map((p) => p.join(",")).join(" "), class: "line " + cls(s, si) }));
    xs.forEach((x, i) => {
      if (s.ys[i] === null || s.ys[i] === undefined) return;
      const dot = svg("circle", { cx: X(x), cy: Y(s.ys[i]), r: 3.5, class: "dot " + cls(s, si) });
      dot.append(svg("title", null, `${s.name}: ${o.pointLabel ? o.pointLabel(i) : x} → ${o.yFmt(s.ys[i])}`));
      root.append(dot);
    });
  });
  host.append(root, legend(o.series.map((s, si) => ({ name: s.name, cls: cls(s, si) }))));
}

// Horizontal bars as HTML (label, bar, value): wraps and scales with the page by itself.
// An item's optional title is the bar's tooltip.
function bars(host, items, cls) {
  const max = Math.max(...items.map((it) => it.value), 0) || 1;
  const box = el("div", { class: "bars" });
  for (const it of items) {
    const fill = el("div", { class: "fill " + (cls || "") });
    fill.style.width = ((100 * it.value) / max).toFixed(2) + "%";
    box.append(el("span", { class: "label", title: it.label, text: it.label }), el("div", { class: "track", title: it.title }, fill), el("span", { class: "value", text: it.text }));
  }
  host.append(box);
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function pct(v) {
  return Math.round(v * 100) + "%";
}

// Summed over packs and tools per day; a day whose turns all had unknown or other-pack search
// ids has no recall (a gap in the lines, not a zero).
function recallChart(host, r) {
  const counted = ["turns", "shown", "fallbacks", "ignored", "unknown_ids", "other_pack"];
  const at = counted.map((c) => r.columns.indexOf(c));
  const sum = (rows) => Object.fromEntries(counted.map((c, k) => [c, rows.reduce((n, row) => n + row[at[k]], 0)]));
  const day = r.columns.indexOf("day");
  const days = [...new Set(r.rows.map((row) => row[day]))].sort();
  const byDay = new Map(days.map((d) => [d, sum(r.rows.filter((row) => row[day] === d))]));
  const all = sum(r.rows);
  const ids = `${all.unknown_ids} unknown search id${all.unknown_ids === 1 ? "" : "s"}, ${all.other_pack} from another pack`;
  if (!all.turns) {
    host.append(el("p", { class: "empty", text: `No turn with a known search yet (${ids}).` }));
    return;
  }
  host.append(
    el("p", {
      class: "sub",
      text:
        `Recall ${pct(all.shown / all.turns)}: ${all.shown} of ${all.turns} turns showed the used tool · ` +
        `not shown: ${all.fallbacks} fallback, ${all.ignored} other tool · ${ids}`,
    })
  );
  const share = (key) => days.map((d) => (byDay.get(d).turns ? byDay.get(d)[key] / byDay.get(d).turns : null));
  const chart = el("div"); // its own box: a redraw replaces the chart, not the line above
  host.append(chart);
  drawn(chart, (h) =>
    lineChart(h, {
      label: "online recall per day",
      xs: days.map((_, i) => i),
      ticks: days.map((d, i) => ({ x: i, label: d })),
      pointLabel: (i) => `${days[i]} (${byDay.get(days[i]).shown}/${byDay.get(days[i]).turns} shown)`,
      yMax: 1,
      yFmt: pct,
      series: [
        { name: "recall (shown / turns)", ys: share("shown"), cls: "s0" },
        { name: "not shown: fallback tool", ys: share("fallbacks"), cls: "bad" },
        { name: "not shown: another tool", ys: share("ignored"), cls: "s1" },
      ],
    })
  );
}

function driftChart(host, r) {
  const days = col(r, "day");
  drawn(host, (h) =>
    lineChart(h, {
      label: "flagged and escalation rate per day",
      xs: days.map((_, i) => i),
      ticks: days.map((d, i) => ({ x: i, label: d })),
      pointLabel: (i) => days[i],
      yMax: Math.min(1, niceMax(Math.max(...col(r, "flagged_rate"), ...col(r, "escalation_rate").map((v) => v || 0)))),
      yFmt: (v) => Math.round(v * 100) + "%",
      series: [
        { name: "flagged rate", ys: col(r, "flagged_rate") },
        { name: "escalation rate", ys: col(r, "escalation_rate") },
      ],
    })
  );
}

function misrouteChart(host, r) {
  bars(
    host,
    r.rows.map((row) => ({ label: row[0], value: row[3], text: `${row[2]}/${row[1]} (${Math.round(row[3] * 100)}%)` })),
    "bad"
  );
}

function confusionChart(host, r) {
  const used = [...new Set(col(r, "used_tool"))].sort();
  const labels = [...new Set(col(r, "label"))].sort();
  const turns = new Map(r.rows.map((row) => [row[0] + "\u0000" + row[1], row[2]]));
  const max = Math.max(...col(r, "turns"));
  const head = el("tr", null, el("th", { scope: "col", text: "used ↓ / label →" }), ...labels.map((l) => el("th", { scope: "col", text: l })));
  const body = el("tbody");
  for (const u of used) {
    const tr = el("tr", null, el("th", { scope: "row", text: u }));
    for (const l of labels) {
      const n = turns.get(u + "\u0000" + l) || 0;
      const td = el("td", { class: "num heat", "data-pair": u + " -> " + l, text: n ? String(n) : "" });
      // Colour by share of the largest pair: the heat map's whole point.
      if (n) td.style.backgroundColor = `rgba(192, 57, 43, ${(0.15 + (0.75 * n) / max).toFixed(3)})`;
      tr.append(td);
    }
    body.append(tr);
  }
  host.append(el("div", { class: "table-wrap heatmap" }, el("table", null, el("thead", null, head), body)));
}

function oracleChart(host, r) {
  const byTier = new Map();
  for (const row of r.rows) {
    const tier = row[0] || "(none)";
    const t = byTier.get(tier) || { decisions: 0, calls: 0, cost: 0 };
    t.decisions += row[2] || 0;
    t.calls += row[3] || 0;
    t.cost += row[6] || 0;
    byTier.set(tier, t);
  }
  const tiers = [...byTier.entries()];
  const spent = tiers.some(([, t]) => t.cost > 0);
  host.append(el("p", { class: "sub", text: spent ? "Cost (USD) per tier" : "Decisions per tier (no teacher spend yet)" }));
  bars(
    host,
    tiers.map(([tier, t]) => ({
      label: tier,
      value: spent ? t.cost : t.decisions,
      text: `${t.decisions} decisions · ${t.calls} calls · $${fmt(t.cost, 6)}`,
    }))
  );
}

function growthChart(host, r) {
  const days = [...new Set(col(r, "day"))].sort();
  // Known tiers weakest first, then any other by name (grey: s4).
  const rank = (t) => (t in TIERS ? Object.keys(TIERS).indexOf(t) : 99);
  const tiers = [...new Set(col(r, "tier"))].sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
  const series = tiers.map((tier) => {
    const perDay = new Map();
    for (const [, day, t, added] of r.rows) if (t === tier) perDay.set(day, (perDay.get(day) || 0) + added);
    let total = 0;
    return { name: tier, ys: days.map((d) => (total += perDay.get(d) || 0)), cls: TIERS[tier] || "s4" };
  });
  // Counts: a top that is a multiple of 4 puts every one of the 5 grid lines on a whole number.
  const top = Math.max(...series.map((s) => s.ys[s.ys.length - 1]));
  const yMax = 4 * Math.ceil(niceMax(top) / 4);
  drawn(host, (h) =>
    lineChart(h, {
      label: "cumulative exemplars per tier",
      xs: days.map((_, i) => i),
      ticks: days.map((d, i) => ({ x: i, label: d })),
      pointLabel: (i) => days[i],
      yMax,
      yFmt: (v) => String(Math.round(v)),
      series,
    })
  );
}

function coldChart(host, r) {
  const spaces = new Map();
  for (const tool of col(r, "tool")) {
    const cut = tool.lastIndexOf("__"); // the namespace, as toolselect.names.namespace
    const ns = cut > 0 ? tool.slice(0, cut) : "(no namespace)";
    spaces.set(ns, (spaces.get(ns) || 0) + 1);
  }
  host.append(el("p", { class: "sub", text: `${r.rows.length} cold tool${r.rows.length === 1 ? "" : "s"}, by namespace` }));
  bars(host, [...spaces.entries()].map(([ns, n]) => ({ label: ns, value: n, text: String(n) })));
}

// The pairs used together most often (rows come ordered by turns, then names).
const TOP_PAIRS = 12;

function pairsChart(host, r) {
  const [a, b, together] = ["a", "b", "together"].map((c) => r.columns.indexOf(c));
  const top = r.rows.slice(0, TOP_PAIRS);
  const shown = r.rows.length > top.length ? `Top ${top.length} of ${r.rows.length} pairs` : plural(r.rows.length, "pair");
  host.append(el("p", { class: "sub", text: `${shown}, by turns that used both tools` }));
  bars(
    host,
    top.map((row) => ({
      label: `${row[a]} + ${row[b]}`,
      value: row[together],
      text: plural(row[together], "turn"),
      title: `${row[a]} and ${row[b]}: used together in ${plural(row[together], "turn")}`,
    }))
  );
}

// The tools with the most steps, each split into its next turns' tools (the first few by
// steps, the rest merged); the destinations most frequent overall keep a colour of their own.
const TOP_SOURCES = 8;
const TOP_STEPS = 4;

function transitionsChart(host, r) {
  const [src, dst, count, share] = ["src", "dst", "count", "share"].map((c) => r.columns.indexOf(c));
  const bySrc = new Map();
  for (const row of r.rows) {
    const s = bySrc.get(row[src]) || { name: row[src], steps: 0, next: [] };
    s.steps += row[count];
    s.next.push({ name: row[dst], count: row[count], share: row[share] });
    bySrc.set(row[src], s);
  }
  const byName = (x, y) => (x.name < y.name ? -1 : x.name > y.name ? 1 : 0);
  const sources = [...bySrc.values()].sort((x, y) => y.steps - x.steps || byName(x, y)).slice(0, TOP_SOURCES);
  for (const s of sources) s.next.sort((x, y) => y.count - x.count || byName(x, y));
  // Colours for the four destinations with the most steps among those drawn; other tools grey.
  const into = new Map();
  for (const s of sources) for (const n of s.next.slice(0, TOP_STEPS)) into.set(n.name, (into.get(n.name) || 0) + n.count);
  const coloured = [...into.entries()].sort((x, y) => y[1] - x[1] || (x[0] < y[0] ? -1 : 1)).slice(0, 4).map(([name]) => name);
  const cls = (name) => (coloured.includes(name) ? "s" + coloured.indexOf(name) : "s4");
  const shown = sources.length < bySrc.size ? `The ${sources.length} of ${bySrc.size} tools with the most steps` : plural(bySrc.size, "tool");
  host.append(el("p", { class: "sub", text: `${shown}; each bar splits a tool's steps by the tools of the next turn` }));
  const box = el("div", { class: "bars" });
  let merged = false;
  for (const s of sources) {
    const parts = s.next.slice(0, TOP_STEPS).map((n) => ({ ...n, cls: cls(n.name), label: n.name === s.name ? `${n.name} (again)` : n.name }));
    const rest = s.next.slice(TOP_STEPS);
    if (rest.length) {
      merged = true;
      const n = rest.reduce((t, x) => t + x.count, 0);
      const names = rest.map((x) => x.name).join(", ");
      parts.push({ name: names, label: plural(rest.length, "other tool"), count: n, share: rest.reduce((t, x) => t + x.share, 0), cls: "rest" });
    }
    const track = el("div", { class: "track stack", role: "img", "aria-label": `${s.name}: ` + parts.map((p) => `${p.label} ${pct(p.share)}`).join(", ") });
    for (const p of parts) {
      const seg = el("div", {
        class: "seg " + p.cls,
        "data-step": `${s.name} -> ${p.name}`,
        title: `${s.name} → ${p.label}: ${p.count} of ${plural(s.steps, "step")} (${pct(p.share)})` + (p.cls === "rest" ? `: ${p.name}` : ""),
        text: `${pct(p.share)} ${p.label}`, // the share first: a narrow segment cuts the end
      });
      seg.style.width = (100 * p.share).toFixed(2) + "%";
      track.append(seg);
    }
    box.append(el("span", { class: "label", title: s.name, text: s.name }), track, el("span", { class: "value", text: plural(s.steps, "step") }));
  }
  host.append(box);
  const items = coloured.map((name, i) => ({ name, cls: "s" + i }));
  if (sources.some((s) => s.next.slice(0, TOP_STEPS).some((n) => !coloured.includes(n.name)))) items.push({ name: "another tool", cls: "s4" });
  if (merged) items.push({ name: "the rest, merged", cls: "rest" });
  host.append(legend(items));
}

function learningCard(fit) {
  const body = learningEl.querySelector(".body");
  body.replaceChildren();
  if (fit instanceof Error) {
    body.append(el("p", { class: "error", text: errorText(fit) }));
    return;
  }
  const ft = fit.free_tier;
  const floor = ft.margin_floor;
  body.append(
    el(
      "p",
      { class: "sub" },
      `${fit.labels} labels · target precision ${ft.target_precision} · margin floor ` +
        (floor === null || floor === undefined ? "none (the free tier does not label)" : `${fmt(floor, 4)} (${ft.floor_source})`)
    )
  );
  const curve = ft.curve || [];
  const chart = el("div", { class: "chart-host" });
  body.append(chart);
  if (curve.length) {
    const xs = curve.map((p) => p.margin);
    const marks = [{ axis: "y", value: ft.target_precision, label: "target" }];
    if (floor !== null && floor !== undefined) marks.push({ axis: "x", value: floor, label: "floor" });
    drawn(chart, (h) =>
      lineChart(h, {
        label: "calibration curve: probability the top tool is right by margin",
        xs,
        ticks: xs.filter((_, i) => i % Math.ceil(xs.length / 6) === 0).map((x) => ({ x, label: fmt(x, 3) })),
        xTitle: "margin (top-1 score − top-2 score)",
        yMax: 1,
        yFmt: (v) => Math.round(v * 100) + "%",
        series: [{ name: "P(top tool right)", ys: curve.map((p) => p.probability) }],
        marks,
      })
    );
  } else {
    chart.append(el("p", { class: "empty", text: "No calibration curve yet: it is fitted once enough turns are labelled." }));
  }
  const fold = fit.fold;
  body.append(
    el("h3", { text: "Fold weights" }),
    table(
      ["description_weight", "shrink", "self_weight", "source", "teacher depth", "teacher recall"],
      [[fold.description_weight, fold.shrink, fold.self_weight, fold.source, fit.teacher.depth, fit.teacher.measured_recall ?? null]]
    )
  );
  if (fold.validation && fold.validation.length) {
    const rows = fold.validation.map((p) => [p.description_weight, p.shrink, p.self_weight, p.top1]);
    body.append(el("h3", { text: "Validation (leave-one-out top-1)" }), table(["description_weight", "shrink", "self_weight", "top1"], rows));
  }
  body.append(el("p", { class: "sub", text: `fitted ${fit.fitted_at || "never"} · embedder ${fit.embedder}` }));
}

// --- the catalog ---------------------------------------------------------------------------------

function catalogCard() {
  const body = $("#catalog .body");
  const needle = $("#catalog-filter").value.trim().toLowerCase();
  const shown = state.tools.filter((t) => !needle || t.name.toLowerCase().includes(needle) || t.description.toLowerCase().includes(needle));
  const rows = el("tbody");
  for (const t of shown) {
    const open = el("button", { type: "button", class: "link", text: t.name, "aria-expanded": "false" });
    const tr = el(
      "tr",
      { "data-tool": t.name },
      el("td", null, open),
      el("td", { class: "num count", text: String(state.counts.get(t.name) || 0) }),
      el("td", { text: (t.packs || []).join(", ") }),
      el("td", { class: "desc", text: t.description })
    );
    open.addEventListener("click", () => toggleExemplars(tr, t.name, open));
    rows.append(tr);
  }
  if (!shown.length) rows.append(el("tr", null, el("td", { class: "empty", colspan: 4, text: "no tools" })));
  const head = el("tr", null, el("th", { text: "tool" }), el("th", { class: "num", text: "exemplars" }), el("th", { text: "packs" }), el("th", { text: "description" }));
  body.replaceChildren(
    el("p", { class: "sub", text: `${shown.length} of ${state.tools.length} tools` }),
    el("div", { class: "table-wrap tall" }, el("table", { id: "catalog-table" }, el("thead", null, head), rows))
  );
}

async function toggleExemplars(tr, name, button) {
  const next = tr.nextElementSibling;
  if (next && next.classList.contains("exemplars")) {
    next.remove();
    button.setAttribute("aria-expanded", "false");
    return;
  }
  button.setAttribute("aria-expanded", "true");
  const cell = el("td", { colspan: 4, text: "Loading…" });
  tr.after(el("tr", { class: "exemplars" }, cell));
  try {
    const data = await api("GET", `/v1/tools/${encodeURIComponent(name)}/exemplars`);
    const list = el("ul");
    for (const ex of data.exemplars) {
      const del = el("button", { type: "button", class: "danger small", text: "Delete" });
      del.addEventListener("click", () => deleteExemplar(ex.id, del.parentElement));
      list.append(el("li", { "data-id": ex.id }, el("q", { text: ex.query }), ` ${ex.tier} · ${ex.created_at.slice(0, 10)} · `, el("code", { text: ex.id }), " ", del));
    }
    cell.replaceChildren(data.exemplars.length ? list : el("span", { class: "empty", text: "no exemplars" }));
  } catch (err) {
    cell.replaceChildren(el("span", { class: "error", text: errorText(err) }));
  }
}

async function deleteExemplar(id, where) {
  try {
    await api("DELETE", "/v1/exemplars/" + encodeURIComponent(id));
    if (where) where.remove();
    await refreshCounts();
  } catch (err) {
    if (where) where.append(el("span", { class: "error", text: " " + errorText(err) }));
  }
}

// Per-tool exemplar counts from the exemplar_growth analysis (all time): one request for the
// whole catalog instead of one per tool.
async function refreshCounts() {
  const growth = await api("GET", "/v1/analytics/exemplar_growth");
  const counts = new Map();
  for (const [tool, , , added] of growth.rows) counts.set(tool, (counts.get(tool) || 0) + added);
  state.counts = counts;
  catalogCard();
}

// --- the tenant ----------------------------------------------------------------------------------

// Who the key is (GET /v1/whoami as the key itself: its own tenant and role), and for an admin
// the tenants it may pick: `default`, its own and those of the listed keys. A failure but 401
// leaves what is known as it was.
async function whoIs() {
  let me;
  try {
    me = await api("GET", "/v1/whoami", undefined, true);
  } catch (err) {
    if (err.status === 401) throw err;
    return;
  }
  state.admin = me.role === "admin";
  state.ownTenant = me.tenant;
  if (!state.admin) return;
  let listed = { keys: [] };
  try {
    listed = await api("GET", "/v1/keys");
  } catch (err) {
    if (err.status === 401) throw err;
  }
  state.tenants = [...new Set([DEFAULT_TENANT, state.ownTenant, ...listed.keys.map((k) => k.tenant)])].sort();
}

function shownTenant() {
  return chosenTenant() || state.ownTenant;
}

function tenantPicker() {
  const admin = state.admin === true;
  if (state.admin === false) sessionStorage.removeItem(TENANT);
  $("#tenant-form").hidden = !admin;
  $("#tenant-shown").hidden = state.admin === null;
  $("#tenant-name").textContent = shownTenant();
  if (!admin) return;
  $("#tenant-names").replaceChildren(...state.tenants.map((t) => el("option", { value: t })));
  const input = $("#tenant");
  if (document.activeElement !== input) input.value = shownTenant();
}

function tenantError(message) {
  const e = $("#tenant-error");
  e.textContent = message;
  e.hidden = !message;
  const input = $("#tenant");
  if (message) input.setAttribute("aria-invalid", "true");
  else input.removeAttribute("aria-invalid");
}

// The picker's value, checked here so a malformed id is reported and never sent; an empty one
// goes back to the key's own tenant. A new tenant re-loads every panel.
function chooseTenant() {
  const value = $("#tenant").value.trim();
  if (value && !TENANT_RE.test(value)) {
    tenantError(`“${value}” is not a tenant id: lower-case letters, digits, _ and -, 1 to 63 characters, starting with a letter or digit.`);
    return;
  }
  tenantError("");
  if ((value || state.ownTenant) === shownTenant()) {
    $("#tenant").value = shownTenant();
    return;
  }
  if (value) sessionStorage.setItem(TENANT, value);
  else sessionStorage.removeItem(TENANT);
  $("#tenant-name").textContent = shownTenant();
  load();
}

// A new key (or none) starts on its own tenant, and is asked again whether it is an admin's.
function forgetTenant() {
  sessionStorage.removeItem(TENANT);
  state.admin = null;
  state.ownTenant = DEFAULT_TENANT;
  state.tenants = [];
  tenantError("");
}

// --- loading -------------------------------------------------------------------------------------

function analysisCard(name) {
  const known = ANALYSES[name] || { title: name, caption: "", chart: null };
  return el(
    "section",
    { id: "card-" + name, class: "card", "data-analysis": name },
    el("h2", { text: known.title }),
    el("p", { class: "caption", text: known.caption }),
    el("div", { class: "chart-host" }),
    el("div", { class: "table-host" })
  );
}

function fillCard(card, name, result) {
  const chart = card.querySelector(".chart-host");
  const tableHost = card.querySelector(".table-host");
  if (result instanceof Error) {
    chart.replaceChildren(el("p", { class: "error", text: errorText(result) }));
    return;
  }
  const known = ANALYSES[name];
  if (known && known.chart && result.rows.length) known.chart(chart, result);
  tableHost.append(table(result.columns, result.rows));
}

async function load() {
  const run = ++state.loads;
  const current = () => run === state.loads;
  setStatus("Loading…");
  let index;
  try {
    index = await api("GET", "/v1/analytics");
    await whoIs();
  } catch (err) {
    if (!current()) return;
    if (err.status !== 401) setStatus(errorText(err), true);
    else setStatus("API key needed", true);
    return;
  }
  if (!current()) return;
  tenantPicker();
  $("#key-prompt").hidden = true;
  $("#dashboard").hidden = false;
  $("header nav").hidden = false;
  $("#forget-key").hidden = !apiKey();
  state.redraw = [];
  const since = $("#since").value;
  const query = since ? "?since=" + encodeURIComponent(since) : "";
  const names = index.analyses.filter((n) => n !== "learning");
  names.sort((a, b) => (ORDER.indexOf(a) + 1 || 99) - (ORDER.indexOf(b) + 1 || 99));
  const [results, tools, fit, growth] = await Promise.all([
    Promise.all(names.map((n) => api("GET", `/v1/analytics/${encodeURIComponent(n)}${query}`).catch((e) => e))),
    api("GET", "/v1/tools").catch((e) => e),
    index.analyses.includes("learning") ? api("GET", "/v1/analytics/learning").catch((e) => e) : null,
    since ? api("GET", "/v1/analytics/exemplar_growth").catch((e) => e) : null,
  ]);
  if (!current()) return;
  const host = $("#analyses");
  host.replaceChildren();
  names.forEach((name, i) => {
    const card = analysisCard(name);
    host.append(card); // attached first: charts measure the card's width
    fillCard(card, name, results[i]);
  });
  // The calibration card joins the analyses' grid after the charts of the known analyses.
  host.insertBefore(learningEl, $("#card-label_conflicts"));
  if (fit) learningCard(fit);
  learningEl.hidden = !fit;
  if (tools instanceof Error) {
    $("#catalog .body").replaceChildren(el("p", { class: "error", text: errorText(tools) }));
  } else {
    state.tools = tools.tools;
    $("#tool-names").replaceChildren(...state.tools.map((t) => el("option", { value: t.name })));
    const all = growth || results[names.indexOf("exemplar_growth")];
    state.counts = new Map();
    if (all && !(all instanceof Error)) for (const [tool, , , added] of all.rows) state.counts.set(tool, (state.counts.get(tool) || 0) + added);
    catalogCard();
  }
  const failed = results.filter((r) => r instanceof Error).length;
  setStatus(failed ? `${failed} analyses failed` : "Loaded " + new Date().toLocaleTimeString(), failed > 0);
}

function askForKey(message) {
  $("#dashboard").hidden = true;
  $("header nav").hidden = true; // its links lead into the hidden dashboard
  $("#key-prompt").hidden = false;
  $("#forget-key").hidden = !apiKey();
  $("#tenant-shown").hidden = true;
  const e = $("#key-error");
  e.textContent = message;
  e.hidden = !message;
  $("#api-key").focus();
}

function showResult(form, text, bad) {
  const p = form.querySelector(".result");
  p.textContent = text;
  p.classList.toggle("error", Boolean(bad));
  p.classList.toggle("ok", !bad);
}

function wire() {
  $("#key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const key = $("#api-key").value.trim();
    if (key !== apiKey()) forgetTenant();
    sessionStorage.setItem(KEY, key);
    $("#api-key").value = "";
    load();
  });
  $("#forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    forgetTenant();
    askForKey("");
  });
  $("#tenant-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    chooseTenant();
  });
  $("#since-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    load();
  });
  $("#refresh").addEventListener("click", () => load());
  $("#catalog-filter").addEventListener("input", () => catalogCard());
  $("#label-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const form = ev.target;
    const query = $("#label-query").value;
    const tool = $("#label-tool").value.trim();
    try {
      const out = await api("POST", "/v1/exemplars", { query, tool });
      const ex = out.exemplar;
      showResult(form, (out.saved ? "Saved" : "Already stored") + `: “${ex.query}” → ${ex.tool} (id ${ex.id})`);
      await refreshCounts();
    } catch (err) {
      showResult(form, errorText(err), true);
    }
  });
  $("#delete-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const form = ev.target;
    const id = $("#delete-id").value.trim();
    try {
      await api("DELETE", "/v1/exemplars/" + encodeURIComponent(id));
      showResult(form, "Deleted exemplar " + id);
      await refreshCounts();
    } catch (err) {
      showResult(form, errorText(err), true);
    }
  });
  let pending = 0;
  window.addEventListener("resize", () => {
    clearTimeout(pending);
    pending = setTimeout(() => state.redraw.forEach((f) => f()), 150);
  });
}

wire();
load();
