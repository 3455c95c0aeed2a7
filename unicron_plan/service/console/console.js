// unicron-plan console: plain JavaScript over the coordinator's HTTP API (docs/service.md).
// No external asset: everything it shows comes from /healthz, /v1/state and /v1/history.
"use strict";

const S = {
  revision: null, health: null, inst: null, entries: [], picked: new Set(), jobIndex: new Map(),
  whatIf: null, busy: false, timing: {}, zoom: false,
  fromNodes: new Map(), // plan id -> Map(job id -> nodes before it), kept so an applied plan still shows them
  alternatives: new Map(), // plan id -> Map(job id -> its alternatives, from GET /v1/plans/{id}/explain)
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

// hostlist() as HTML whose lines break only after a comma, never inside a node name or number
function hostlistHtml(names) {
  return hostlist(names).split(/(?<=,)/).map((part) => `<span class="hl">${esc(part)}</span>`).join("<wbr>");
}

// Job colours keep away from the colours that mean failure: no red, pink or magenta (hues 285-45,
// around the pending-failure red), nothing as dark as a failed GPU or as pale as a free one.
const JOB_HUES = [45, 285];
function jobColour(i) {
  const hue = JOB_HUES[0] + (i * 137.508) % (JOB_HUES[1] - JOB_HUES[0]);
  const light = [46, 56, 42, 52][i % 4];
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
      if (S.zoom) parts.push('<div class="nw">');
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
      if (S.zoom) parts.push(`<span class="nm">${esc(n.id)}</span></div>`);
    }
    parts.push("</div></div>");
  }
  $("racks").innerHTML = parts.join("");
  $("racks").classList.toggle("zoomed", S.zoom);
  S.owners = owners;
  S.pending = pending;
  $("cluster-counts").textContent =
    `${fmt(inst.cluster.nodes.length, 0)} nodes in ${fmt(racks.size, 0)} racks · ${fmt(healthy, 0)} healthy GPUs · ` +
    `${fmt(used, 0)} in use · ${fmt(down, 0)} node${down === 1 ? "" : "s"} down`;
  let legend = "";
  inst.jobs.forEach((j, i) => {
    if (j.current.gpus > 0) legend += `<span data-job="${esc(j.id)}"><i class="j${i}"></i>${esc(j.id)}</span>`;
  });
  legend += '<span><i class="free"></i>free</span><span><i class="x"></i>failed (cross-hatched)</span>' +
    '<span><i class="p"></i>failure pending (striped)</span>';
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
    const gpuMin = ts === null ? null : j.current.gpus * ts / 60;
    rows.push(`<tr data-job="${esc(j.id)}"><td><i class="sw j${i}"></i>${esc(j.id)}</td>` +
      `<td class="num">${fmt(j.current.gpus, 0)}</td><td>${esc((j.throughput && j.throughput.gpu_type) || "")}</td>` +
      `<td class="num">${th}</td><td class="num">${fmt(j.weight, 3)}</td>` +
      `<td><span class="state ${states[i]}">${states[i]}</span></td>` +
      `<td class="num">${ts === null ? "derived" : fmt(ts, 0) + " s"}</td>` +
      `<td class="num">${gpuMin === null || !j.current.gpus ? "–" : fmt(gpuMin, 1) + " GPU-min"}</td></tr>`);
  });
  $("jobs").tBodies[0].innerHTML = rows.join("");
  const running = states.filter((s) => s === "running" || s === "hit").length;
  $("jobs-count").textContent = `${inst.jobs.length} jobs · ${running} running · ${states.filter((s) => s === "waiting").length} waiting (0 GPUs)`;
}

// ------------------------------------------------------------------ plans
// The words are the plan's own (docs/format.md, glossary): actions keep, shrink, grow, restart, suspend,
// resume, idle; reasons hit (forced by the event) and chosen (for the gain); the objective as a rate.
const REASONS = [["hit", "hit by the event (forced)"], ["chosen", "chosen for the gain (not hit)"],
  ["unchanged", "leaving (job_exit: 0 GPUs, nothing charged)"]];
const ACTION_ORDER = {suspend: 0, shrink: 1, restart: 2, grow: 3, resume: 4};

function reasonOf(pj) { return pj.reason || (pj.hit ? "hit" : "chosen"); } // (plans from before reasons)

function fromNodesOf(inst) { return new Map((inst ? inst.jobs : []).map((j) => [j.id, j.current.nodes || []])); }

function planRows(plan, from) {
  // the changed jobs; ``from``: job id -> its nodes before the plan (null: not known)
  const rows = [];
  for (const pj of plan.jobs) {
    if (pj.action === "keep" || pj.action === "idle") continue; // (an unchanged job that acts is a leaving one)
    rows.push({id: pj.id, action: pj.action, reason: reasonOf(pj), from: pj.previous_gpus, to: pj.gpus,
      fromNodes: from ? from.get(pj.id) || [] : null, toNodes: pj.nodes, why: pj.why || "",
      keepCost: pj.keep_cost, seconds: pj.transition_seconds, penalty: pj.transition_penalty || 0});
  }
  rows.sort((a, b) => (ACTION_ORDER[a.action] ?? 9) - (ACTION_ORDER[b.action] ?? 9) || a.id.localeCompare(b.id));
  return rows;
}

function rate(plan, tflop) { return tflop / plan.d_run_seconds; }

function pendingText(p) {
  if (p === undefined) return "";
  if (p === null) return "no pending event included";
  const parts = [];
  if (p.failure) {
    const f = p.failure;
    parts.push("the pending failure of " + [f.failed_nodes && f.failed_nodes.length ? hostlist(f.failed_nodes) : "",
      f.failed_gpus && f.failed_gpus.length ? `${f.failed_gpus.length} GPU(s)` : ""].filter(Boolean).join(" and "));
  }
  if (p.job_exit) parts.push("the pending exit of " + p.job_exit.join(", "));
  if (p.job_arrival) parts.push("the pending arrival of " + p.job_arrival.join(", "));
  return "includes " + parts.join("; ");
}

function planHtml(plan, inst, from) {
  const rows = planRows(plan, from), alts = S.alternatives.get(plan.plan_id);
  const withFrom = from !== null && from !== undefined;
  let gpuMin = 0;
  for (const r of rows) if (r.penalty > 0 && r.seconds) gpuMin += r.from * r.seconds / 60;
  const hours = plan.d_run_seconds / 3600;
  const trans = plan.jobs.reduce((s, j) => s + (j.transition_penalty || 0), 0);
  const counts = plan.changes || rows.reduce((c, r) => (c[r.reason] = (c[r.reason] || 0) + 1, c), {});
  const summary = REASONS.slice(0, 2).map(([k]) => `${counts[k] || 0} ${k}`).join(" · ") +
    (plan.changes ? ` · ${plan.changes.unchanged} unchanged` : "");
  const pend = pendingText(plan.includes_pending);
  let html = `<dl class="terms">
    <dt>objective</dt><dd><b id="objective-rate">${fmt(rate(plan, plan.objective), 0)}</b> weighted TFLOP/s over a ${fmt(hours, 2)} h horizon (${fmt(plan.objective, 0)} TFLOP: useful work minus transitions)</dd>
    <dt>useful work</dt><dd>${fmt(plan.waf_tflops, 0)} weighted TFLOP/s running after the plan</dd>
    <dt>transitions</dt><dd>−${fmt(rate(plan, trans), 0)} weighted TFLOP/s over the horizon · <span id="gpu-minutes">${fmt(gpuMin, 1)}</span> GPU-min lost</dd>
    <dt>status</dt><dd>${esc(plan.status.solution)} (bound ${fmt(rate(plan, plan.bound), 0)} weighted TFLOP/s) · solver ${esc(plan.solver.name)} in ${fmt(plan.solver.wall_seconds * 1000, 1)} ms</dd>
    <dt>changes</dt><dd id="plan-changes">${esc(summary)}${plan.drained_nodes && plan.drained_nodes.length ? " · drains " + hostlistHtml(plan.drained_nodes) : ""}</dd>
    ${pend ? `<dt>events</dt><dd class="pending-included">${esc(pend)}</dd>` : ""}
  </dl>`;
  for (const [reason, title] of REASONS) {
    const group = rows.filter((r) => r.reason === reason);
    if (!group.length) continue;
    html += `<h3 class="grp" data-reason="${reason}">${title} · ${group.length}</h3>` +
      `<table class="diff" data-reason="${reason}"><thead><tr><th>job</th><th>action</th><th class="num">GPUs</th>` +
      `<th class="num">transition</th>${withFrom ? "<th>from nodes</th>" : ""}<th>to nodes</th></tr></thead><tbody>`;
    for (const r of group) {
      const lost = withFrom ? r.fromNodes.filter((n) => !r.toNodes.includes(n)) : null;
      const gained = withFrom ? r.toNodes.filter((n) => !r.fromNodes.includes(n)) : r.toNodes;
      const keep = r.keepCost === undefined || r.keepCost === null ? "" :  // (its why says when keeping is not feasible)
        `keeping it instead: −${fmt(rate(plan, r.keepCost), 1)} weighted TFLOP/s`;
      html += `<tr data-job="${esc(r.id)}" data-action="${esc(r.action)}" data-reason="${esc(r.reason)}">` +
        `<td>${esc(r.id)}${r.why ? `<div class="why">${esc(r.why)}</div>` : ""}${keep ? `<div class="why keep">${esc(keep)}</div>` : ""}` +
        `${alts && alts.has(r.id) ? `<div class="why alt">alternatives: ${esc(alts.get(r.id))}</div>` : ""}</td>` +
        `<td><span class="act ${esc(r.action)}">${esc(r.action)}</span></td>` +
        `<td class="num">${r.from}&nbsp;→&nbsp;${r.to}</td>` +
        `<td class="num">${r.penalty > 0 && r.seconds ? `${fmt(r.seconds, 0)}&nbsp;s · ${fmt(r.from * r.seconds / 60, 1)}&nbsp;GPU-min` : "–"}</td>` +
        (withFrom ? `<td class="nodes">${lost.length ? "−" + hostlistHtml(lost) : "–"}</td>` : "") +
        `<td class="nodes">${gained.length ? (withFrom ? "+" : "") + hostlistHtml(gained) : "–"}</td></tr>`;
    }
    html += "</tbody></table>";
  }
  if (!rows.length) html += '<p class="muted">No job changes.</p>';
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
  if (current) S.fromNodes.set(p.plan_id, fromNodesOf(inst)); // kept: after apply the state no longer has them
  $("plan-tag").textContent = `${p.plan_id} · ${applied ? "applied at revision " + applied.revision : current ? "ready to apply" : "stale (the state moved on)"}`;
  let html = "";
  if (applied) {
    const t = new Date(applied.at);
    html += `<p id="apply-confirmation" class="confirm">✓ ${esc(p.plan_id)} applied: the scheduler confirmed it at revision ${applied.revision}` +
      `${isNaN(t) ? "" : ", " + esc(t.toISOString().slice(11, 19)) + " UTC"}</p>`;
  }
  html += planHtml(p, inst, current || applied ? S.fromNodes.get(p.plan_id) || null : null);
  if (current) html += `<div class="row"><button id="apply" class="primary" type="button" data-plan="${esc(p.plan_id)}">apply ${esc(p.plan_id)}</button><span class="muted">confirms the scheduler carried it out</span>` +
    (S.alternatives.has(p.plan_id) ? "" : `<button id="explain" type="button" data-plan="${esc(p.plan_id)}">alternatives</button><span class="muted">keeping each job, the next best count (re-plans: takes seconds)</span>`) + "</div>";
  el.innerHTML = html;
  const b = $("apply");
  if (b) b.addEventListener("click", () => applyPlan(b.dataset.plan));
  const x = $("explain");
  if (x) x.addEventListener("click", () => explainPlan(x.dataset.plan));
}

// ------------------------------------------------------------------ events, contingency, history
function renderEvents(inst) {
  const ev = inst && inst.event;
  if (!ev) { $("events").innerHTML = '<p class="muted">Nothing pending: the cluster is as last applied.</p>'; return; }
  let what = "";
  if (ev.kind === "failure") {
    const parts = [];
    if (ev.failed_nodes && ev.failed_nodes.length) parts.push(`${ev.failed_nodes.length} node(s) ${hostlistHtml(ev.failed_nodes)}`);
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
      const c = b.changes, changed = (b.jobs || []).filter((j) => j.action !== "keep" && j.action !== "idle").length;
      const what = c ? `${c.hit} hit, ${c.chosen} chosen` : `${changed} changed`;
      return `${b.plan_id}: objective ${fmt(b.objective / b.d_run_seconds, 0)} weighted TFLOP/s over ${fmt(b.d_run_seconds / 3600, 2)} h, ${what} (${b.solver ? b.solver.name : ""})`;
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
  $("picked").innerHTML = list.length ? `${list.length} node(s): ${hostlistHtml(list)}` : "no node picked";
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
      `<p id="whatif-includes" class="muted">${esc(pendingText(plan.includes_pending) || "")}: the failure of the picked nodes ` +
      `${plan.includes_pending ? "on top of the events recorded and not yet applied" : "alone"}</p>` +
      `<div id="whatif-plan" data-objective="${plan.objective}">${planHtml(plan, S.inst, fromNodesOf(S.inst))}</div>`;
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

async function explainPlan(id) {
  const btn = $("explain");
  if (btn) btn.disabled = true;
  try {
    const ex = await api(`/v1/plans/${encodeURIComponent(id)}/explain`);
    S.alternatives.set(id, new Map(ex.jobs.map((j) => [j.id, j.alternatives])));
    renderPlan(S.inst);
  } catch (e) {
    say("alternatives: " + e.message);
    if (btn) btn.disabled = false;
  }
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
  $("clear-pick").addEventListener("click", () => { S.picked.clear(); $("rack-pick").value = ""; renderPicked(); });
  $("dry-run").addEventListener("click", dryRun);
  $("record").addEventListener("click", recordFailure);
  $("zoom").addEventListener("click", () => {
    S.zoom = !S.zoom;
    $("zoom").setAttribute("aria-pressed", String(S.zoom));
    $("zoom").textContent = S.zoom ? "overview" : "zoom: node names";
    if (S.inst) { renderCluster(S.inst); renderPicked(); }
  });
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
