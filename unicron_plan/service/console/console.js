// unicron-plan console: plain JavaScript over the coordinator's HTTP API (docs/service.md).
// No external asset: everything it shows comes from /healthz, /v1/state and /v1/history.
"use strict";

const S = {
  revision: null, health: null, inst: null, entries: [], picked: new Set(), jobIndex: new Map(),
  whatIf: null, busy: false, timing: {},
};
window.unicronConsole = S.timing; // render timings, read by the browser tests

// ------------------------------------------------------------------ helpers
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const fmt = (x, digits = 1) => (x === null || x === undefined || !isFinite(x)) ? "–"
  : Number(x).toLocaleString("en-US", {maximumFractionDigits: digits});

function token() { return sessionStorage.getItem("unicron-token") || ""; }

async function api(path, opts = {}) {
  const headers = Object.assign({}, opts.headers || {});
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (opts.body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {method: opts.method || "GET", headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body)});
  let doc = null;
  try { doc = await r.json(); } catch (e) { doc = null; }
  if (!r.ok) {
    const err = new Error((doc && doc.error) || ("HTTP " + r.status));
    err.status = r.status;
    throw err;
  }
  return doc;
}

function say(text, kind = "error") {
  const m = $("message");
  if (!text) { m.hidden = true; return; }
  m.textContent = text;
  m.className = "message " + (kind === "info" ? "info" : "");
  m.hidden = false;
}

// "n00003", "n00004", "n00005", "n00009" -> "n[00003-00005,00009]"
function hostlist(names) {
  if (!names || !names.length) return "–";
  const groups = new Map(), other = [];
  for (const n of names) {
    let k = n.length;  // the trailing digits, found by one scan from the end (a regex backtracks: quadratic)
    while (k > 0 && n.charCodeAt(k - 1) >= 48 && n.charCodeAt(k - 1) <= 57) k--;
    if (k === n.length) { other.push(n); continue; }
    const prefix = n.slice(0, k), digits = n.slice(k);
    const key = prefix + "\u0000" + digits.length;
    if (!groups.has(key)) groups.set(key, {prefix, width: digits.length, nums: []});
    groups.get(key).nums.push(parseInt(digits, 10));
  }
  const out = [];
  for (const g of groups.values()) {
    const nums = [...new Set(g.nums)].sort((a, b) => a - b), parts = [];
    const pad = (x) => String(x).padStart(g.width, "0");
    for (let i = 0; i < nums.length;) {
      let j = i;
      while (j + 1 < nums.length && nums[j + 1] === nums[j] + 1) j++;
      parts.push(i === j ? pad(nums[i]) : pad(nums[i]) + "-" + pad(nums[j]));
      i = j + 1;
    }
    out.push(nums.length === 1 ? g.prefix + parts[0] : g.prefix + "[" + parts.join(",") + "]");
  }
  return out.concat(other).join(",");
}

function jobColour(i) {
  const hue = (i * 137.508 + 200) % 360;
  const light = [46, 58, 38, 52][i % 4];
  return `hsl(${hue.toFixed(1)},${[62, 70, 55][i % 3]}%,${light}%)`;
}

function tflopsAt(job, gpus) {
  if (!gpus) return 0;
  const t = job.throughput && job.throughput.tflops;
  return t ? (t[String(gpus)] ?? null) : null;
}

function transitionSeconds(job, inst) {
  if (job.transition_seconds !== undefined && job.transition_seconds !== null) return job.transition_seconds;
  const d = inst && inst.cost && inst.cost.default_transition_seconds;
  return d === undefined ? null : d;
}

// ------------------------------------------------------------------ cluster
function gpuOwners(inst) {
  // nodeId -> array of job index per GPU (-1 free, -2 failed before); pending failures separately
  const owners = new Map(), byId = new Map();
  for (const n of inst.cluster.nodes) {
    const a = new Array(n.gpus).fill(-1);
    for (const g of n.failed_gpus || []) a[g] = -2;
    owners.set(n.id, a);
    byId.set(n.id, n);
  }
  inst.jobs.forEach((j, ji) => {
    let need = j.current.gpus;
    for (const nid of j.current.nodes || []) {
      const a = owners.get(nid);
      if (!a) continue;
      for (let g = 0; g < a.length && need > 0; g++) if (a[g] === -1) { a[g] = ji; need--; }
    }
  });
  const pending = new Map(); // nodeId -> Set of GPUs failing in the pending event (whole: all)
  const ev = inst.event;
  if (ev && ev.kind === "failure") {
    for (const nid of ev.failed_nodes || []) {
      const n = byId.get(nid);
      if (n) pending.set(nid, new Set([...Array(n.gpus).keys()]));
    }
    for (const fg of ev.failed_gpus || []) {
      if (!pending.has(fg.node)) pending.set(fg.node, new Set());
      pending.get(fg.node).add(fg.gpu);
    }
  }
  return {owners, pending};
}

function racksOf(inst) {
  const racks = new Map();
  for (const n of inst.cluster.nodes) {
    const r = n.rack ?? n.id;
    if (!racks.has(r)) racks.set(r, []);
    racks.get(r).push(n);
  }
  return racks;
}

function renderCluster(inst) {
  const t0 = performance.now();
  const {owners, pending} = gpuOwners(inst);
  const racks = racksOf(inst);
  // one class per job colour: a short stylesheet instead of 16,384 inline styles
  let css = "";
  inst.jobs.forEach((j, i) => { css += `body i.j${i},body .node.solid.j${i}{background-color:${jobColour(i)}}`; });
  let style = document.getElementById("job-colours");
  if (!style) { style = document.createElement("style"); style.id = "job-colours"; document.head.appendChild(style); }
  style.textContent = css;
  const parts = [];
  let down = 0, healthy = 0, used = 0;
  for (const [rack, nodes] of racks) {
    parts.push(`<div class="rack" data-rack="${esc(rack)}"><b title="rack ${esc(rack)}: click to pick it">${esc(rack)}</b><div class="nodes">`);
    for (const n of nodes) {
      const a = owners.get(n.id), p = pending.get(n.id);
      const isDown = a.every((x) => x === -2);
      const cls = ["node"];
      if (isDown) { cls.push("failed", "drained"); down++; }
      if (p && p.size) cls.push("pending");
      if (S.picked.has(n.id)) cls.push("picked");
      const cols = n.gpus <= 8 ? Math.max(1, Math.ceil(n.gpus / 2)) : Math.ceil(Math.sqrt(n.gpus * 2));
      const fill = new Array(a.length); // per GPU: "x" failed, "p" failing, "jN" job N, "" free
      for (let g = 0; g < a.length; g++) {
        const o = a[g];
        if (o === -2) { fill[g] = "x"; continue; }
        healthy++;
        if (o >= 0) used++;
        fill[g] = p && p.has(g) ? "p" : o >= 0 ? "j" + o : "";
      }
      if (fill.every((f) => f === fill[0])) {
        // one element for a node whose GPUs look alike (most nodes): its cells are drawn by CSS
        const rows = Math.ceil(a.length / cols);
        cls.push("solid", fill[0] || "f");
        parts.push(`<div class="${cls.join(" ")}" data-node="${esc(n.id)}" data-fill="${fill[0]}" data-gpus="${a.length}" style="width:${cols * 6 + 3}px;height:${rows * 6 + 3}px"></div>`);
      } else {
        let cells = "";
        for (const f of fill) cells += f ? `<i class="${f}"></i>` : "<i></i>";
        parts.push(`<div class="${cls.join(" ")}" data-node="${esc(n.id)}" style="grid-template-columns:repeat(${cols},5px)">${cells}</div>`);
      }
    }
    parts.push("</div></div>");
  }
  $("racks").innerHTML = parts.join("");
  S.owners = owners;
  S.pending = pending;
  $("cluster-counts").textContent =
    `${fmt(inst.cluster.nodes.length, 0)} nodes in ${fmt(racks.size, 0)} racks · ${fmt(healthy, 0)} healthy GPUs · ` +
    `${fmt(used, 0)} in use · ${fmt(down, 0)} node${down === 1 ? "" : "s"} down`;
  let legend = "";
  inst.jobs.forEach((j, i) => {
    if (j.current.gpus > 0) legend += `<span data-job="${esc(j.id)}"><i class="j${i}"></i>${esc(j.id)}</span>`;
  });
  legend += '<span><i style="background:var(--free)"></i>free</span><span><i style="background:var(--failed)"></i>failed</span>' +
    '<span><i style="background:var(--bad)"></i>failure pending</span>';
  $("legend").innerHTML = legend;
  const rp = $("rack-pick"), keep = rp.value;
  rp.innerHTML = '<option value="">rack…</option>' + [...racks.keys()].map((r) => `<option>${esc(r)}</option>`).join("");
  rp.value = keep;
  void $("racks").offsetHeight; // layout now, so the timing covers it
  S.timing.clusterMs = performance.now() - t0;
}

// ------------------------------------------------------------------ jobs
function jobStates(inst) {
  const ev = inst.event || {};
  const hitNodes = new Set();
  if (ev.kind === "failure") {
    for (const n of ev.failed_nodes || []) hitNodes.add(n);
    for (const g of ev.failed_gpus || []) hitNodes.add(g.node);
  }
  const exits = new Set(ev.kind === "job_exit" ? ev.jobs : []);
  const arrivals = new Set(ev.kind === "job_arrival" ? ev.jobs : []);
  return inst.jobs.map((j) => {
    if (exits.has(j.id)) return "leaving";
    if (arrivals.has(j.id)) return "arriving";
    if ((j.current.nodes || []).some((n) => hitNodes.has(n))) return "hit";
    return j.current.gpus > 0 ? "running" : "waiting";
  });
}

function renderJobs(inst) {
  const states = jobStates(inst), rows = [];
  const order = inst.jobs.map((j, i) => i).sort((a, b) => inst.jobs[b].current.gpus - inst.jobs[a].current.gpus || (a - b));
  order.forEach((i) => {
    const j = inst.jobs[i];
    const tp = tflopsAt(j, j.current.gpus);
    const th = !j.current.gpus ? "–" : tp === null ? (j.throughput && j.throughput.model ? esc(j.throughput.model) + " (model)" : "–") : fmt(tp, 0);
    const ts = transitionSeconds(j, inst);
    const cost = ts === null || tp === null ? null : j.weight * tp * ts / 3600;
    rows.push(`<tr data-job="${esc(j.id)}"><td><i class="sw j${i}"></i>${esc(j.id)}</td>` +
      `<td class="num">${fmt(j.current.gpus, 0)}</td><td>${esc((j.throughput && j.throughput.gpu_type) || "")}</td>` +
      `<td class="num">${th}</td><td class="num">${fmt(j.weight, 3)}</td>` +
      `<td><span class="state ${states[i]}">${states[i]}</span></td>` +
      `<td class="num">${ts === null ? "derived" : fmt(ts / 60, 1) + " min"}</td>` +
      `<td class="num">${cost === null || !j.current.gpus ? "–" : fmt(cost, 1) + " TFLOP-h"}</td></tr>`);
  });
  $("jobs").tBodies[0].innerHTML = rows.join("");
  const running = states.filter((s) => s === "running" || s === "hit").length;
  $("jobs-count").textContent = `${inst.jobs.length} jobs · ${running} running · ${states.filter((s) => s === "waiting").length} waiting (0 GPUs)`;
}

// ------------------------------------------------------------------ plans
function planRows(plan, inst) {
  // what changes: grows, shrinks, moves, stops; "from" nodes when the plan is made for ``inst`` (else null)
  const cur = new Map((inst ? inst.jobs : []).map((j) => [j.id, j]));
  const rows = [];
  for (const pj of plan.jobs) {
    if (pj.action === "keep" || pj.action === "idle") continue;
    const before = cur.get(pj.id);
    const from = before ? before.current.nodes || [] : null;
    let label = pj.action;
    if (pj.action === "suspend") label = "stop";
    if (pj.action === "restart") {
      // same count: a job not hit restarts only because it moves; a hit one may move too
      const a = from && [...from].sort().join(","), b = [...pj.nodes].sort().join(",");
      label = from ? (a === b ? "restart" : "move") : (pj.hit ? "restart" : "move");
    }
    rows.push({id: pj.id, label, action: pj.action, from: pj.previous_gpus, to: pj.gpus,
      fromNodes: from, toNodes: pj.nodes, penalty: pj.transition_penalty || 0});
  }
  const order = {stop: 0, shrink: 1, move: 2, restart: 3, grow: 4, resume: 5};
  rows.sort((a, b) => (order[a.label] ?? 9) - (order[b.label] ?? 9) || a.id.localeCompare(b.id));
  return rows;
}

function planHtml(plan, inst, withFrom) {
  const rows = planRows(plan, withFrom ? inst : null);
  const byId = new Map((inst ? inst.jobs : []).map((j) => [j.id, j]));
  let minutes = 0, restarts = 0, unknown = false;
  for (const r of rows) {
    if (r.penalty <= 0) continue;
    restarts++;
    const j = byId.get(r.id), ts = j ? transitionSeconds(j, inst) : null;
    if (ts === null) unknown = true; else minutes += ts / 60;
  }
  const useful = plan.waf_tflops * plan.d_run_seconds / 3600;
  const trans = plan.jobs.reduce((s, j) => s + (j.transition_penalty || 0), 0) / 3600;
  const counts = {};
  for (const r of rows) counts[r.label] = (counts[r.label] || 0) + 1;
  const summary = Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(" · ") || "no job changes";
  let html = `<dl class="terms">
    <dt>objective</dt><dd><b>${fmt(plan.objective / 3600)}</b> TFLOP-hours (weighted useful work minus transitions)</dd>
    <dt>useful work</dt><dd>${fmt(useful)} TFLOP-hours = ${fmt(plan.waf_tflops, 0)} TFLOP/s × ${fmt(plan.d_run_seconds / 3600, 2)} h (D_run)</dd>
    <dt>transitions</dt><dd>−${fmt(trans)} TFLOP-hours · ${restarts} job${restarts === 1 ? "" : "s"} restart${restarts === 1 ? "s" : ""}, ${unknown ? "≥ " : ""}${fmt(minutes, 1)} minutes of transition</dd>
    <dt>status</dt><dd>${esc(plan.status.solution)} (bound ${fmt(plan.bound / 3600)} TFLOP-hours) · solver ${esc(plan.solver.name)} in ${fmt(plan.solver.wall_seconds * 1000, 1)} ms</dd>
    <dt>changes</dt><dd>${esc(summary)}${plan.drained_nodes && plan.drained_nodes.length ? " · drains " + esc(hostlist(plan.drained_nodes)) : ""}</dd>
  </dl>`;
  if (rows.length) {
    html += `<div class="scroll"><table class="diff"><thead><tr><th>job</th><th></th><th class="num">GPUs</th>${withFrom ? "<th>from nodes</th>" : ""}<th>to nodes</th></tr></thead><tbody>`;
    for (const r of rows) {
      const lost = withFrom && r.fromNodes ? r.fromNodes.filter((n) => !r.toNodes.includes(n)) : null;
      const gained = withFrom && r.fromNodes ? r.toNodes.filter((n) => !r.fromNodes.includes(n)) : r.toNodes;
      html += `<tr data-job="${esc(r.id)}" data-action="${esc(r.label)}"><td>${esc(r.id)}</td><td><span class="act ${esc(r.label)}">${esc(r.label)}</span></td>` +
        `<td class="num">${r.from} → ${r.to}</td>` +
        (withFrom ? `<td class="nodes">${lost && lost.length ? "−" + esc(hostlist(lost)) : "–"}</td>` : "") +
        `<td class="nodes">${gained && gained.length ? (withFrom ? "+" : "") + esc(hostlist(gained)) : "–"}</td></tr>`;
    }
    html += "</tbody></table></div>";
  }
  return html;
}

function renderPlan(inst) {
  let plan = null, applied = null;
  for (const e of S.entries) {
    if (e.type === "plan") { plan = e; applied = null; }
    if (e.type === "apply" && plan && e.body.plan_id === plan.body.plan_id) applied = e;
  }
  const el = $("plan");
  if (!plan) { el.innerHTML = '<p class="muted">No plan in the recent history.</p>'; $("plan-tag").textContent = ""; return; }
  const p = plan.body, current = !applied && inst && p.revision === S.revision;
  $("plan-tag").textContent = `${p.plan_id} · ${applied ? "applied at revision " + applied.revision : current ? "ready to apply" : "stale (the state moved on)"}`;
  let html = planHtml(p, inst, current);
  if (current) html += `<div class="row"><button id="apply" class="primary" type="button" data-plan="${esc(p.plan_id)}">apply ${esc(p.plan_id)}</button><span class="muted">confirms the scheduler carried it out</span></div>`;
  el.innerHTML = html;
  const b = $("apply");
  if (b) b.onclick = () => applyPlan(b.dataset.plan);
}

// ------------------------------------------------------------------ events, contingency, history
function renderEvents(inst) {
  const ev = inst && inst.event;
  if (!ev) { $("events").innerHTML = '<p class="muted">Nothing pending: the cluster is as last applied.</p>'; return; }
  let what = "";
  if (ev.kind === "failure") {
    const parts = [];
    if (ev.failed_nodes && ev.failed_nodes.length) parts.push(`${ev.failed_nodes.length} node(s) ${esc(hostlist(ev.failed_nodes))}`);
    if (ev.failed_gpus && ev.failed_gpus.length) parts.push(`${ev.failed_gpus.length} GPU(s) ` + esc(ev.failed_gpus.slice(0, 12).map((g) => g.node + ":" + g.gpu).join(", ")) + (ev.failed_gpus.length > 12 ? ", …" : ""));
    what = parts.join("; ");
  } else what = esc((ev.jobs || []).join(", "));
  $("events").innerHTML = `<p id="pending-event" data-kind="${esc(ev.kind)}"><span class="kind event">${esc(ev.kind)}</span> ${what}</p>`;
}

function renderContingency(h) {
  const p = h.precomputed || {done: 0, total: 0};
  const pct = p.total ? Math.round(100 * p.done / p.total) : 0;
  $("contingency").innerHTML = `<div>index <span class="pill-inline">${esc(h.contingency)}</span> · answers stored for single-node failures: <b id="precomputed">${fmt(p.done, 0)} / ${fmt(p.total, 0)}</b></div>` +
    `<div class="bar" title="${pct}%"><div style="width:${pct}%"></div></div>`;
}

function entrySummary(e) {
  const b = e.body || {};
  switch (e.type) {
    case "cluster": return `cluster uploaded: ${fmt((b.cluster && b.cluster.nodes || []).length, 0)} nodes, ${fmt((b.jobs || []).length, 0)} jobs`;
    case "event":
      if (b.kind === "failure") return `failure of ${hostlist(b.failed_nodes)}${b.failed_gpus && b.failed_gpus.length ? ` and ${b.failed_gpus.length} GPU(s)` : ""}`;
      if (b.kind === "repair") return `repair of ${hostlist(b.repaired_nodes)}${b.repaired_gpus && b.repaired_gpus.length ? ` and ${b.repaired_gpus.length} GPU(s)` : ""}`;
      return `${b.kind}: ${(b.jobs || []).join(", ")}`;
    case "plan": {
      const changed = (b.jobs || []).filter((j) => j.action !== "keep" && j.action !== "idle").length;
      return `${b.plan_id}: objective ${fmt(b.objective / 3600)} TFLOP-hours, ${changed} job(s) change (${b.solver ? b.solver.name : ""})`;
    }
    case "apply": return `applied ${b.plan_id}`;
    case "job": return b.op === "add" ? `job ${b.job && b.job.id} queued` : `job ${b.id} removed`;
    default: return "";
  }
}

function renderHistory() {
  const items = S.entries.slice().reverse().map((e) => {
    const t = new Date(e.at);
    const when = isNaN(t) ? e.at : t.toISOString().slice(5, 10) + " " + t.toISOString().slice(11, 19);
    return `<li data-revision="${e.revision}"><span class="t">#${e.revision}</span><span class="t">${esc(when)}</span>` +
      `<span class="kind ${esc(e.type)}">${esc(e.type)}</span><span>${esc(entrySummary(e))}</span></li>`;
  });
  $("history").innerHTML = items.join("") || '<li class="muted">empty</li>';
}

function renderSummary(h) {
  const inst = S.inst;
  const pill = h.contingency === "ready" ? "ok" : h.contingency === "building" ? "warn" : "";
  $("summary").innerHTML = `<span>revision <b id="revision">${h.revision}</b></span>` +
    (inst ? `<span>${esc(inst.name || "cluster")}</span>` : "<span>no cluster yet</span>") +
    `<span class="pill ${pill}">contingency ${esc(h.contingency)}</span>` +
    (inst && inst.event ? '<span class="pill bad">event pending</span>' : "") +
    `<span class="muted">updated ${new Date().toLocaleTimeString()}</span>`;
}

// ------------------------------------------------------------------ what if
function renderPicked() {
  const list = [...S.picked];
  $("picked").textContent = list.length ? `${list.length} node(s): ${hostlist(list)}` : "no node picked";
  $("dry-run").disabled = $("record").disabled = !list.length || !S.inst;
  for (const el of document.querySelectorAll(".node.picked")) if (!S.picked.has(el.dataset.node)) el.classList.remove("picked");
  for (const id of list) {
    const el = document.querySelector(`.node[data-node="${CSS.escape(id)}"]`);
    if (el) el.classList.add("picked");
  }
}

function failureBody() { return {kind: "failure", failed_nodes: [...S.picked], failed_gpus: []}; }

async function dryRun() {
  const btn = $("dry-run");
  btn.disabled = true;
  try {
    const t0 = performance.now();
    const plan = await api("/v1/events?dry_run=true", {method: "POST", body: failureBody()});
    S.timing.dryRunMs = performance.now() - t0;
    $("whatif-result").innerHTML = `<h2>Dry-run plan <span class="muted">nothing recorded · revision ${plan.revision}</span></h2>` +
      `<div id="whatif-plan" data-objective="${plan.objective}">${planHtml(plan, S.inst, true)}</div>`;
    say(null);
  } catch (e) { say("dry run: " + e.message); }
  finally { btn.disabled = !S.picked.size; }
}

async function recordFailure() {
  try {
    const plan = await api("/v1/events", {method: "POST", body: failureBody()});
    S.picked.clear();
    $("whatif-result").innerHTML = "";
    say(`recorded; plan ${plan.plan_id} is ready to apply (below)`, "info");
    await refresh(true);
  } catch (e) { say("record failure: " + (e.status === 401 ? "a token is needed (enter it above)" : e.message)); }
}

async function applyPlan(id) {
  try {
    await api(`/v1/plans/${encodeURIComponent(id)}/apply`, {method: "POST"});
    say(`${id} applied`, "info");
    await refresh(true);
  } catch (e) { say("apply: " + (e.status === 401 ? "a token is needed (enter it above)" : e.message)); }
}

// ------------------------------------------------------------------ refresh loop
async function refresh(force = false) {
  if (S.busy) return;
  S.busy = true;
  try {
    const h = await api("/healthz");
    S.health = h;
    if (force || h.revision !== S.revision) {
      const t0 = performance.now();
      const st = await api("/v1/state");
      const hist = await api(`/v1/history?since=${Math.max(0, st.revision - 60)}`);
      S.timing.fetchMs = performance.now() - t0;
      S.revision = st.revision;
      S.inst = st.instance;
      S.entries = hist.entries;
      const t1 = performance.now();
      if (S.inst) {
        const ids = new Set(S.inst.cluster.nodes.map((n) => n.id));
        for (const id of [...S.picked]) if (!ids.has(id)) S.picked.delete(id);
        renderCluster(S.inst);
        renderJobs(S.inst);
      } else {
        $("racks").innerHTML = '<p class="muted">No cluster yet: <code>PUT /v1/cluster</code> uploads one.</p>';
      }
      renderEvents(S.inst);
      renderPlan(S.inst);
      renderHistory();
      renderPicked();
      S.timing.renderMs = performance.now() - t1;
      S.timing.drawnAt = performance.now(); // since navigation start
      S.timing.revision = S.revision;
    }
    renderSummary(h);
    renderContingency(h);
    if (!force) say(null);
  } catch (e) {
    say(e.status === 401 ? "This coordinator needs its token: enter it above." : "cannot reach the coordinator: " + e.message);
  } finally { S.busy = false; }
}

function init() {
  $("token").value = token();
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("unicron-token", $("token").value.trim());
    refresh(true);
  });
  $("racks").addEventListener("click", (ev) => {
    const node = ev.target.closest(".node");
    if (node) {
      const id = node.dataset.node;
      if (S.picked.has(id)) S.picked.delete(id); else S.picked.add(id);
      renderPicked();
      return;
    }
    const head = ev.target.closest(".rack > b");
    if (head) pickRack(head.parentElement.dataset.rack);
  });
  $("racks").addEventListener("mouseover", (ev) => {
    const node = ev.target.closest(".node");
    if (node && !node.title) node.title = nodeTitle(node.dataset.node);
  });
  $("rack-pick").addEventListener("change", (ev) => { if (ev.target.value) pickRack(ev.target.value); });
  $("clear-pick").onclick = () => { S.picked.clear(); $("rack-pick").value = ""; renderPicked(); };
  $("dry-run").onclick = dryRun;
  $("record").onclick = recordFailure;
  refresh(true);
  setInterval(refresh, 1000);
}

function nodeTitle(id) {
  // the tooltip, built when the pointer first reaches the node (16,384 of them at render would cost time)
  const n = S.inst && S.inst.cluster.nodes.find((x) => x.id === id);
  if (!n) return id;
  const a = S.owners.get(id), p = S.pending.get(id);
  const jobs = [...new Set(a.filter((o) => o >= 0))].map((o) => S.inst.jobs[o].id);
  const state = a.every((x) => x === -2) ? "down" : p && p.size ? "failure pending" : "healthy";
  return `${id} · rack ${n.rack ?? id} · ${n.gpu_type} · ${state} · ${jobs.join(", ") || "free"}`;
}

function pickRack(rack) {
  if (!S.inst) return;
  S.picked.clear();
  for (const n of S.inst.cluster.nodes) {
    const down = (n.failed_gpus || []).length >= n.gpus;
    if ((n.rack ?? n.id) === rack && !down) S.picked.add(n.id);
  }
  $("rack-pick").value = rack;
  renderPicked();
}

init();
