"""The dashboard page: HTML, CSS and the script that renders a payload from `report.py`.

The script builds every user-visible string with `textContent` (never innerHTML), so
sweep names, space names and error texts always render as text. Filters re-plot each
figure from its original traces: whole traces by `meta.sweep`/`meta.family`, single
points by the row id in `customdata[i][0]`.
"""

from __future__ import annotations

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 0; color: #222; background: #f6f7f9; }
header { background: #1d2b3a; color: #fff; padding: 12px 20px; }
header h1 { margin: 0; font-size: 20px; font-weight: 600; }
header .sub { font-size: 13px; opacity: .85; margin-top: 4px; }
#filters { display: flex; flex-wrap: wrap; gap: 18px; padding: 10px 20px; background: #fff; border-bottom: 1px solid #ddd; position: sticky; top: 0; z-index: 5; }
#filters fieldset { border: 1px solid #ccd; border-radius: 6px; padding: 4px 10px; margin: 0; font-size: 13px; }
#filters legend { font-weight: 600; font-size: 12px; color: #456; }
#filters label { margin-right: 10px; white-space: nowrap; }
main { display: grid; grid-template-columns: minmax(0, 1fr) 360px; gap: 16px; padding: 16px 20px; }
#figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 16px; }
section.card { margin-top: 16px; }
.card { background: #fff; border: 1px solid #dde; border-radius: 8px; padding: 6px; }
aside .card { position: sticky; top: 64px; }
aside h2, section h2 { font-size: 15px; margin: 6px 8px; }
#config-yaml { background: #f3f5f8; padding: 8px; font-size: 12px; max-height: 420px; overflow: auto; white-space: pre; }
table { border-collapse: collapse; width: 100%; font-size: 12.5px; }
th, td { text-align: left; padding: 4px 6px; border-bottom: 1px solid #eee; }
tbody tr { cursor: pointer; } tbody tr:hover { background: #eef4ff; }
tr.selected { background: #ffeeba !important; }
.muted { color: #778; font-size: 12px; margin: 6px 8px; }
button, a.button { background: #1f6feb; color: #fff; border: 0; border-radius: 5px; padding: 6px 12px; font-size: 13px; cursor: pointer; text-decoration: none; display: inline-block; }
#live { font-size: 12px; margin-left: 10px; opacity: .8; }
.warning { color: #8a4b00; font-size: 12px; margin: 4px 8px; }
"""

SCRIPT = r"""
"use strict";
const S = {data: null, off: {sweep: new Set(), family: new Set(), budget: new Set()}, selected: null, originals: {}};
const $ = (id) => document.getElementById(id);
const TOP_ROWS = 20, UNFINISHED_ROWS = 100;
function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}
const DTYPES = {f8: Float64Array, f4: Float32Array, i1: Int8Array, u1: Uint8Array, i2: Int16Array,
                u2: Uint16Array, i4: Int32Array, u4: Uint32Array};
function decode(v) {  // numpy arrays travel as base64 typed arrays (plotly.py, report._typed)
  if (v && typeof v === "object" && v.shared !== undefined) v = S.data.shared[v.shared];  // report._share
  if (v && typeof v === "object" && v.codes) return decode(v.codes).map((c) => v.values[c]);  // report._coded
  if (!v || typeof v !== "object" || !v.bdata) return v;
  const bytes = Uint8Array.from(atob(v.bdata), (c) => c.charCodeAt(0));
  return Array.from(new DTYPES[v.dtype](bytes.buffer), (x) => Number.isNaN(x) ? null : x);
}
function esc(text) {  // as Python's html.escape(text, quote=False): frames.esc
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}
function expand(rows) {  // columns of few values arrive as {values, codes} (report._coded), numbers typed
  for (const [k, v] of Object.entries(rows)) rows[k] = decode(v);
  // The hover title names the trial (frames._hover_title), the rest is its candidate's (hover_body).
  rows.hover = rows.hover.map((body, i) => "<b>" + esc(rows.sweep[i]) + "</b> · " + esc(rows.label[i]) +
    " · seed " + esc(rows.seed[i] === null ? "-" : rows.seed[i]) + "<br>" + body);
}
function human(n) {
  if (n === null || n === undefined) return "–";
  for (const [u, s] of [["E", 1e18], ["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6], ["K", 1e3]]) if (Math.abs(n) >= s) return (n / s).toPrecision(3) + u;
  return Number(n).toPrecision(3);
}
function rowOk(i) {
  const r = S.data.rows;
  return !S.off.sweep.has(r.sweep[i]) && !S.off.family.has(r.family[i]) && !S.off.budget.has(r.budget[i]);
}
function filterTrace(trace) {
  const meta = trace.meta || {};
  const out = Object.assign({}, trace);
  if ((meta.sweep && S.off.sweep.has(meta.sweep)) || (meta.family && S.off.family.has(meta.family))) out.visible = false;
  if (!meta.rows || !trace.customdata) return out;
  const keep = [];
  trace.customdata.forEach((cd, i) => { if (cd && rowOk(cd[0])) keep.push(i); });
  const pick = (arr) => Array.isArray(arr) && arr.length === trace.customdata.length ? keep.map((i) => arr[i]) : arr;
  for (const key of ["x", "y", "customdata", "text", "hovertext"]) if (key in trace) out[key] = pick(trace[key]);
  for (const key of ["error_y", "error_x", "marker"]) if (trace[key]) {
    out[key] = Object.assign({}, trace[key]);
    for (const sub of ["array", "arrayminus", "color", "size", "symbol"]) if (sub in trace[key]) out[key][sub] = pick(trace[key][sub]);
  }
  return out;
}
function decodeTrace(trace) {  // a payload trace as plotly takes it (report._lean, report._share)
  const out = Object.assign({}, trace);
  for (const key of ["x", "y", "customdata", "text"]) if (key in out) out[key] = decode(out[key]);
  if (out.meta && out.meta.ids) out.customdata = out.customdata.map((id) => [id, S.data.rows.hover[id]]);
  for (const [key, subs] of [["error_y", ["array", "arrayminus"]], ["marker", ["color", "size"]]]) if (out[key]) {
    out[key] = Object.assign({}, out[key]);
    for (const sub of subs) if (sub in out[key]) out[key][sub] = decode(out[key][sub]);
  }
  return out;
}
function drawFigures() {
  const box = $("figures");
  const ids = new Set(S.data.figures.map((f) => "card-" + f.id));
  for (const card of Array.from(box.children)) if (!ids.has(card.id)) { Plotly.purge(card.firstChild); card.remove(); }
  for (const f of S.data.figures) {
    let div = $("fig-" + f.id);
    if (!div) {
      const card = el("div", null, {class: "card", id: "card-" + f.id});
      div = el("div", null, {id: "fig-" + f.id, class: "figure"});
      card.appendChild(div);
      box.appendChild(card);
    }
    div.style.height = (f.figure.layout.height || 450) + "px";
    S.originals[f.id] = {data: f.figure.data.map(decodeTrace), layout: f.figure.layout};
    if (["widths", "param-split"].includes(f.id) || /^(curves|vs-baseline)/.test(f.id)) div.parentNode.style.gridColumn = "1 / -1";
    Plotly.react(div, S.originals[f.id].data.map(filterTrace), f.figure.layout, {responsive: true, displaylogo: false});
    if (!div.dataset.bound) {
      div.on("plotly_click", (ev) => { const cd = ev.points[0] && ev.points[0].customdata; if (cd) select(cd[0]); });
      div.dataset.bound = "1";
    }
  }
}
function applyFilters() {
  for (const f of S.data.figures) {
    const orig = S.originals[f.id];
    Plotly.react($("fig-" + f.id), orig.data.map(filterTrace), orig.layout);
  }
  drawComparisons();
  drawTable();
}
function checkboxGroup(name, label, values, labels) {
  const set = el("fieldset", null, {id: "filter-" + name});
  set.appendChild(el("legend", label));
  values.forEach((value, i) => {
    const lab = el("label");
    const box = el("input", null, {type: "checkbox", "data-filter": name});
    box.value = value;
    box.checked = !S.off[name].has(value);
    box.addEventListener("change", () => { box.checked ? S.off[name].delete(value) : S.off[name].add(value); applyFilters(); });
    lab.appendChild(box);
    lab.appendChild(document.createTextNode(" " + (labels ? labels[i] : value)));
    set.appendChild(lab);
  });
  return set;
}
function drawHeader() {
  const d = S.data;
  $("title").textContent = d.title;
  const parts = d.sweeps.map((s) => s.name + (s.space ? " (space " + s.space + ")" : "") + ": " +
    s.counts.completed + " completed, " + s.counts.stopped_early + " stopped early, " + s.counts.failed + " failed" +
    (s.counts.running ? ", " + s.counts.running + " running" : ""));
  $("subtitle").textContent = parts.join(" · ") || "no trials yet";
  const box = $("filters");
  box.replaceChildren(
    checkboxGroup("sweep", "Sweep", d.sweeps.map((s) => s.name)),
    checkboxGroup("family", "Family", d.families),
    checkboxGroup("budget", "Budget (non-embedding params)", d.budgets));
}
function drawComparisons() {  // report.build_payload's `comparisons` (dashboards/comparisons.py)
  const box = $("comparisons");
  box.replaceChildren();
  for (const t of S.data.comparisons || []) {
    if (S.off.sweep.has(t.sweep)) continue;
    const section = el("section", null, {class: "card comparison", "data-sweep": t.sweep});
    section.appendChild(el("h2", "Candidates of " + t.sweep + (t.metric ? " by mean " + t.metric + " over seeds" : "")));
    if (t.problem) { section.appendChild(el("div", t.problem, {class: "warning"})); box.appendChild(section); continue; }
    section.appendChild(el("div", t.seeds, {class: "muted"}));
    for (const n of t.notes || []) section.appendChild(el("div", n, {class: "muted"}));
    for (const w of t.warnings) section.appendChild(el("div", "warning: " + w, {class: "warning"}));
    const table = el("table"), head = el("tr"), body = el("tbody");
    for (const h of t.columns) head.appendChild(el("th", h));
    table.appendChild(el("thead")).appendChild(head);
    table.appendChild(body);
    for (const row of t.rows) {
      const tr = el("tr");
      for (const cell of row) tr.appendChild(el("td", cell));
      body.appendChild(tr);
    }
    section.appendChild(table);
    if (t.more) section.appendChild(el("div", "… and " + t.more + " more (shapesweep status " + t.sweep + " lists them all)", {class: "muted"}));
    if (t.per_tuned) {  // each candidate at every tuned value (status NAME --per tuned)
      section.appendChild(el("h3", "Per tuned value: each candidate against the baseline at the same value and at the baseline's chosen one"));
      const per = el("table"), top = el("tr"), rows = el("tbody");
      for (const h of t.per_tuned.columns) top.appendChild(el("th", h));
      per.appendChild(el("thead")).appendChild(top);
      per.appendChild(rows);
      for (const row of t.per_tuned.rows) {
        const tr = el("tr");
        for (const cell of row) tr.appendChild(el("td", cell));
        rows.appendChild(tr);
      }
      section.appendChild(per);
      if (t.per_tuned.more) section.appendChild(el("div", "… and " + t.per_tuned.more + " more (shapesweep status " + t.sweep + " --per tuned lists them all)", {class: "muted"}));
    }
    box.appendChild(section);
  }
}
function drawTable() {
  const d = S.data, r = d.rows, box = $("top-tables");
  box.replaceChildren();
  for (const m of d.metrics) {
    const sign = m.lower_is_better ? 1 : -1;
    const idx = r.sweep.map((_, i) => i).filter((i) => r.metric_name[i] === m.name && r.status[i] === "completed" && r.metric[i] !== null && rowOk(i));
    idx.sort((a, b) => sign * (r.metric[a] - r.metric[b]));
    const section = el("section", null, {class: "card top", "data-metric": m.name});
    section.appendChild(el("h2", "Top trials by " + m.label));
    const shown = Math.min(idx.length, TOP_ROWS);
    section.appendChild(el("div", (idx.length > shown ? "the best " + shown + " of " : "") + idx.length +
      " completed trials that match the filters", {class: "muted top-count"}));
    const table = el("table"), head = el("tr"), body = el("tbody");
    const params = m.name === "val_loss" ? "non-emb params" : "trainable params";  // vision: W_in only if trained
    for (const h of ["#", "sweep", "family", "candidate", params, "train FLOPs", m.label, "seed"]) head.appendChild(el("th", h));
    table.appendChild(el("thead")).appendChild(head);
    table.appendChild(body);
    idx.slice(0, TOP_ROWS).forEach((i, rank) => {
      const tr = el("tr", null, {"data-row": i});
      for (const cell of [rank + 1, r.sweep[i], r.design[i], r.label[i], human(r.params_non_embedding[i]),
                          human(r.training_flops[i]), r.metric[i].toFixed(4), r.seed[i]]) tr.appendChild(el("td", cell));
      if (S.selected === i) tr.classList.add("selected");
      tr.addEventListener("click", () => select(i));
      body.appendChild(tr);
    });
    section.appendChild(table);
    box.appendChild(section);
  }
  const failed = $("failed-body");
  failed.replaceChildren();
  const order = {running: 0, failed: 1, stopped_early: 2};
  const open = r.sweep.map((_, i) => i).filter((i) => r.status[i] !== "completed" && rowOk(i));
  open.sort((a, b) => (order[r.status[a]] ?? 3) - (order[r.status[b]] ?? 3));
  open.slice(0, UNFINISHED_ROWS).forEach((i) => {
    const tr = el("tr", null, {"data-status": r.status[i]});
    for (const cell of [r.sweep[i], r.label[i], r.seed[i], r.status[i].replace("_", " "), r.reason[i] || ""]) tr.appendChild(el("td", cell));
    failed.appendChild(tr);
  });
  if (open.length > UNFINISHED_ROWS) failed.appendChild(el("tr")).appendChild(el("td", "… and " + (open.length - UNFINISHED_ROWS) + " more", {colspan: "5"}));
  $("failed-section").style.display = failed.children.length ? "" : "none";
}
function yamlScalar(v) {
  if (typeof v === "number" && !Number.isInteger(v)) {
    const s = String(v);
    return /e/.test(s) && !/\./.test(s) ? s.replace("e", ".0e") : s;  // PyYAML floats need a dot
  }
  return JSON.stringify(v);
}
function toYaml(obj, indent) {
  indent = indent || "";
  return Object.keys(obj).map((k) => {
    const v = obj[k], key = /^[A-Za-z_][A-Za-z0-9_]*$/.test(k) ? k : JSON.stringify(k);
    if (v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length) return indent + key + ":\n" + toYaml(v, indent + "  ");
    if (Array.isArray(v)) return indent + key + ": [" + v.map(yamlScalar).join(", ") + "]";
    return indent + key + ": " + (v && typeof v === "object" ? "{}" : yamlScalar(v));
  }).join("\n");
}
function candidateDocument(i) {
  const r = S.data.rows, doc = Object.assign({}, S.data.docs[r.doc[i]]);
  if (S.data.trains[r.train[i]] !== null) doc.train = S.data.trains[r.train[i]];
  doc.provenance = {sweep: r.sweep[i], trial_id: r.trial_id[i], seed: r.seed[i]};
  doc.metrics = {[r.metric_name[i]]: r.metric[i]};
  return doc;
}
function fileName(i) {
  const r = S.data.rows;
  return (r.sweep[i] + "-" + r.trial_id[i]).replace(/[^A-Za-z0-9._-]/g, "_") + ".yaml";
}
function select(i) {
  S.selected = i;
  const r = S.data.rows;
  $("config-title").textContent = r.sweep[i] + " · " + r.label[i] + " · seed " + r.seed[i] + " · " + r.status[i] +
    " (trial " + r.trial_id[i] + ")";
  const yaml = r.doc[i] !== null ? toYaml(candidateDocument(i)) + "\n" : "";
  $("config-yaml").textContent = yaml || "this trial has no stored configuration";
  const link = $("download");
  link.style.display = yaml ? "" : "none";
  link.setAttribute("download", fileName(i));
  if (window.LIVE) {
    link.href = "api/config?sweep=" + encodeURIComponent(r.sweep[i]) + "&trial_id=" + encodeURIComponent(r.trial_id[i]);
  } else {
    if (link.dataset.url) URL.revokeObjectURL(link.dataset.url);
    link.href = link.dataset.url = URL.createObjectURL(new Blob([yaml], {type: "application/x-yaml"}));
  }
  drawTable();
}
function render(data) {
  const first = S.data === null;
  expand(data.rows);
  S.data = data;
  drawHeader();
  drawFigures();
  drawComparisons();
  drawTable();
  if (S.selected !== null && S.selected < data.rows.sweep.length) select(S.selected);
  document.body.dataset.version = data.version || "";
  document.body.dataset.ready = "1";
  if (first) document.dispatchEvent(new Event("dashboard-ready"));
}
async function poll() {
  try {
    const v = await (await fetch("api/version")).json();
    if (v.version !== S.data.version) render(await (await fetch("api/dashboard")).json());
    $("live").textContent = "live · updated " + new Date().toLocaleTimeString();
  } catch (e) { $("live").textContent = "live · server unreachable"; }
}
window.addEventListener("load", async () => {
  if (window.LIVE) {
    render(await (await fetch("api/dashboard")).json());
    setInterval(poll, window.POLL_MS);
  } else {
    render(JSON.parse($("payload").textContent));
  }
});
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>shapesweep dashboard</title>
<link rel="icon" href="data:,">
<style>{css}</style>
{plotly}
</head>
<body>
<header><h1 id="title">shapesweep</h1><div class="sub"><span id="subtitle"></span><span id="live"></span></div></header>
<div id="filters"></div>
<main>
  <div>
    <div id="figures"></div>
    <div id="comparisons"></div>
    <div id="top-tables"></div>
    <section class="card" id="failed-section" style="margin-top:16px">
      <h2>Trials that did not complete: running, stopped, failed</h2>
      <table><thead><tr><th>sweep</th><th>candidate</th><th>seed</th><th>status</th><th>why</th></tr></thead><tbody id="failed-body"></tbody></table>
    </section>
  </div>
  <aside><div class="card">
    <h2>Selected configuration</h2>
    <div class="muted" id="config-title">Click a point or a table row.</div>
    <pre id="config-yaml"></pre>
    <a id="download" class="button" style="display:none" href="#">Download candidate YAML</a>
    <div class="muted">Train it with <code>shapesweep train FILE.yaml</code>.</div>
  </div></aside>
</main>
{data}
<script>window.LIVE = {live}; window.POLL_MS = {poll_ms};</script>
<script>{script}</script>
</body>
</html>
"""


def render_page(payload: str | None = None, plotly_js: str | None = None,
                plotly_src: str = "plotly.min.js", poll_ms: int = 3000) -> str:
    """The report (payload and plotly.js embedded) or, with no payload, the live page."""
    plotly = f"<script>{plotly_js}</script>" if plotly_js else f'<script src="{plotly_src}"></script>'
    data = f'<script type="application/json" id="payload">{payload}</script>' if payload else ""
    return TEMPLATE.format(css=CSS, plotly=plotly, data=data, live="true" if payload is None else "false",
                           poll_ms=int(poll_ms), script=SCRIPT)
