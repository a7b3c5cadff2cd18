// kai-ray dashboard: four pages over the read-only JSON API (/api/v1), no libraries.
// Every URL is relative, so the same page works on the scheduler's own port and under
// Ray's dashboard (/kai-ray/). Pages re-fetch when the server's stream says the state
// changed; once a page has drawn, body[data-rendered] names it (tests and the benchmark
// wait for that).
"use strict";
(() => {
  const S = {
    page: null, revision: -1, res: "gpu", hours: 6, detail: null, queues: [],
    wl: { q: "", state: "", queue: "", sort: "line", offset: 0, limit: 200 },
  };
  const main = document.getElementById("main");
  const $ = (sel) => document.querySelector(sel);
  const esc = (s) => String(s ?? "").replace(/[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

  async function get(path) {
    const r = await fetch(path, { credentials: "same-origin" });
    if (!r.ok) {
      let msg = r.statusText;
      try { msg = (await r.json()).error || msg; } catch (e) { /* not JSON */ }
      throw new Error(`${r.status}: ${msg}`);
    }
    return r.json();
  }

  // ------------------------------------------------------------ formatting
  function num(x) {
    if (x === null || x === undefined) return "–";
    if (x < 0) return "∞";
    return String(Math.round(x * 100) / 100);
  }
  function bytes(x) {
    if (x === null || x === undefined) return "–";
    if (x < 0) return "∞";
    const units = ["B", "Ki", "Mi", "Gi", "Ti", "Pi"];
    let i = 0;
    while (x >= 1024 && i < units.length - 1) { x /= 1024; i++; }
    return `${Math.round(x * 10) / 10}${units[i]}`;
  }
  const amount = (x) => (S.res === "memory" ? bytes(x) : num(x));
  function dur(s) {
    if (s === null || s === undefined) return "";
    s = Math.max(0, Math.round(s));
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
    return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  }
  // A duration as the scheduler's own sentences say it (control/runtime.py format_duration):
  // its two largest units, rounded to the smaller, so "~1h30m" here is "about 1h30m" there.
  function span(s) {
    s = Math.max(0, Math.round(s));
    const step = s >= 86400 ? 3600 : s >= 3600 ? 60 : 1;
    s = Math.round(s / step) * step;
    const parts = [[Math.floor(s / 86400), "d"], [Math.floor((s % 86400) / 3600), "h"],
      [Math.floor((s % 3600) / 60), "m"], [s % 60, "s"]];
    return parts.filter(([n]) => n).slice(0, 2).map(([n, u]) => `${n}${u}`).join("") || "0s";
  }
  const clock = (t) => new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  function hue(name) {
    let h = 0;
    for (const c of String(name)) h = (h * 31 + c.charCodeAt(0)) >>> 0;
    return `hsl(${h % 360} 62% 52%)`;
  }

  // ------------------------------------------------------------ queues
  const QueuesPage = {
    mount() {
      main.innerHTML = `<h2>Queues</h2>
        <div class="controls" id="res">${["gpu", "cpu", "memory"].map((r) =>
          `<button data-res="${r}"${r === S.res ? " disabled" : ""}>${r.toUpperCase()}</button>`).join("")}
        <span class="legend"><span><i style="background:var(--at)"></i>allocated</span>
        <span><i style="background:var(--over)"></i>allocated over fair share</span>
        <span><i style="background:#cbd5e1"></i>requested</span>
        <span><i style="background:var(--fair)"></i>fair share</span>
        <span><i style="background:var(--quota)"></i>quota</span></span></div>
        <table id="queues"><thead><tr><th>Queue</th><th>Fair share</th><th>Bars</th>
        <th>Allocated / fair / quota / requested / limit</th><th class="num">Waiting</th>
        <th class="num">Running</th><th class="num">Priority</th><th class="num">Weight</th>
        <th>Tenants</th><th>Ceiling</th></tr></thead>
        <tbody></tbody></table>`;
      $("#res").addEventListener("click", (e) => {
        const r = e.target.dataset && e.target.dataset.res;
        if (r) { S.res = r; QueuesPage.mount(); refresh(); }
      });
    },
    async update() {
      const data = await get("api/v1/queues");
      S.queues = data.items;
      $("#queues tbody").innerHTML = data.items.map(queueRow).join("");
    },
  };

  function queueRow(q) {
    const r = q.resources[S.res];
    const limit = r.limit >= 0 ? r.limit : 0;
    const top = Math.max(r.quota > 0 ? r.quota : 0, r.fair_share || 0, r.allocated, r.requested, limit) || 1;
    const pct = (x) => `${Math.min(100, (100 * Math.max(0, x || 0)) / top)}%`;
    const over = q.over.includes(S.res);
    const standing = q.standing === "over" ? `over (${q.over.join(", ")})` : q.standing;
    const marks = (r.fair_share !== null ? `<span class="mark fair" style="left:${pct(r.fair_share)}" title="fair share ${amount(r.fair_share)}"></span>` : "") +
      (r.quota > 0 ? `<span class="mark quota" style="left:${pct(r.quota)}" title="quota ${amount(r.quota)}"></span>` : "");
    return `<tr data-queue="${esc(q.name)}" data-standing="${esc(q.standing)}">
      <td style="padding-left:${8 + 18 * q.depth}px">${q.children.length ? "▾ " : ""}<b>${esc(q.name)}</b></td>
      <td><span class="badge standing-${esc(q.standing)}">${esc(standing)}</span></td>
      <td><div class="bar"><span class="req" style="width:${pct(r.requested)}"></span>
        <span class="alloc${over ? " over" : ""}" style="width:${pct(r.allocated)}"></span>${marks}</div></td>
      <td class="figs">${amount(r.allocated)} / ${amount(r.fair_share)} / ${amount(r.quota)} / ${amount(r.requested)} / ${amount(r.limit)}${S.res === "gpu" ? byType(q) : ""}</td>
      <td class="num">${q.pending}</td><td class="num">${q.running}</td>
      <td class="num">${q.priority}</td><td class="num">${num(r.over_quota_weight)}</td>${accessCells(q)}</tr>`;
  }

  // Who may submit to the queue, and the highest priority it takes: the rule in effect
  // along its path, "from P" where a parent's rule sets it (a child only narrows it); the
  // rule as written in the tooltip. Workloads the rule refuses now, as a badge.
  function accessCells(q) {
    const a = q.access ? q.access.effective : null;
    if (!a) return "<td></td><td></td>";
    const from = (queue) => (queue && queue !== q.name ? ` <span class="muted">from ${esc(queue)}</span>` : "");
    const who = a.open ? `<span class="muted">any</span>`
      : a.closed_by_default ? `<span class="muted">none (closed by default)</span>`
      : a.tenant_rules.map((t) => esc(t.words) + from(t.queue)).join(" <i>and</i> ");
    const refused = q.refused ? ` <span class="badge refused">${q.refused} refused</span>` : "";
    const top = a.max_priority !== null
      ? `≤ ${a.max_priority}${a.max_priority_class ? ` (${esc(a.max_priority_class)})` : ""}${from(a.max_priority_from)}` : "";
    const classes = a.priority_classes
      ? `<div class="muted">classes ${a.priority_classes.map((c) => esc(c.name)).join(", ") || "none"}${from(a.priority_classes_from)}</div>` : "";
    const title = esc(ownRule(q.access.own));
    return `<td class="tenants" title="${title}">${who}${refused}</td>
      <td class="ceiling" title="${title}">${top || classes ? top + classes : `<span class="muted">–</span>`}</td>`;
  }

  function ownRule(own) {
    if (!own) return "no rule of its own";
    const parts = [];
    if (own.tenants) parts.push(`tenants: ${own.tenants.join(", ") || "none"}`);
    if (own.tenant_selector) parts.push(`tenantSelector: ${own.tenant_selector}`);
    if (own.max_priority !== null) parts.push(`maxPriority: ${own.max_priority_class || own.max_priority}`);
    if (own.priority_classes) parts.push(`priorityClasses: ${own.priority_classes.map((c) => c.name).join(", ")}`);
    return `its rule: ${parts.join("; ")}`;
  }

  // Per GPU type a queue names: allocated / fair share / quota / limit, one line each.
  function byType(q) {
    return Object.entries(q.gpu_types || {}).map(([t, f]) =>
      `<div class="muted by-type" data-gpu-type="${esc(t)}">${esc(t)}: ${num(f.allocated)} / ${num(f.fair_share)} / ${num(f.quota)} / ${f.limit >= 0 ? num(f.limit) : "∞"}</div>`).join("");
  }

  // ------------------------------------------------------------ workloads
  const WorkloadsPage = {
    mount() {
      const states = ["", "Queued", "Admitting", "Running", "Preempting", "Succeeded", "Failed", "Cancelled"];
      const sorts = ["line", "waiting", "starts", "priority", "created", "name", "queue", "state", "gpus", "preemptions"];
      main.innerHTML = `<h2>Workloads</h2><div class="controls">
        <input id="wl-q" type="search" placeholder="search id, name, queue, reason" value="${esc(S.wl.q)}" size="34">
        <select id="wl-state">${states.map((s) => `<option value="${s}"${s === S.wl.state ? " selected" : ""}>${s || "any state"}</option>`).join("")}</select>
        <select id="wl-queue"><option value="">any queue</option></select>
        <label class="muted">sort <select id="wl-sort">${sorts.map((s) => `<option${s === S.wl.sort ? " selected" : ""}>${s}</option>`).join("")}</select></label>
        <span id="wl-count" class="muted"></span></div>
        <table id="workloads"><thead><tr><th>Workload</th><th>State</th><th>Queue</th><th class="num">Priority</th>
        <th>In line</th><th>Waiting</th><th title="estimated start">Starts</th><th class="num">GPUs</th><th class="num">Preempted</th><th>Why</th></tr></thead>
        <tbody></tbody></table><div class="pager"><button id="wl-prev">‹ previous</button>
        <span id="wl-page" class="muted"></span><button id="wl-next">next ›</button></div>`;
      let timer = null;
      $("#wl-q").addEventListener("input", (e) => {
        clearTimeout(timer);
        timer = setTimeout(() => { S.wl.q = e.target.value; S.wl.offset = 0; refresh(); }, 200);
      });
      for (const [id, key] of [["#wl-state", "state"], ["#wl-queue", "queue"], ["#wl-sort", "sort"]]) {
        $(id).addEventListener("change", (e) => { S.wl[key] = e.target.value; S.wl.offset = 0; refresh(); });
      }
      $("#wl-prev").addEventListener("click", () => { S.wl.offset = Math.max(0, S.wl.offset - S.wl.limit); refresh(); });
      $("#wl-next").addEventListener("click", () => { S.wl.offset += S.wl.limit; refresh(); });
      $("#workloads tbody").addEventListener("click", (e) => {
        const tr = e.target.closest("tr[data-workload]");
        if (tr) showDetail(tr.dataset.workload);
      });
    },
    async update() {
      const p = new URLSearchParams();
      for (const k of ["q", "state", "queue", "sort", "offset", "limit"]) if (S.wl[k] !== "") p.set(k, S.wl[k]);
      const [data, queues] = await Promise.all([get(`api/v1/workloads?${p}`), get("api/v1/queues")]);
      const sel = $("#wl-queue");
      const names = queues.items.filter((q) => !q.children.length).map((q) => q.name);
      if (sel.options.length !== names.length + 1) {
        sel.innerHTML = `<option value="">any queue</option>` + names.map((n) =>
          `<option${n === S.wl.queue ? " selected" : ""}>${esc(n)}</option>`).join("");
      }
      $("#workloads tbody").innerHTML = data.items.map(workloadRow).join("");
      $("#wl-count").textContent = `${data.total} workload${data.total === 1 ? "" : "s"}`;
      const last = Math.min(data.total, data.offset + data.items.length);
      $("#wl-page").textContent = data.total ? `${data.offset + 1}–${last} of ${data.total}` : "";
      $("#wl-prev").disabled = data.offset === 0;
      $("#wl-next").disabled = last >= data.total;
    },
  };

  function workloadRow(w) {
    const line = w.position !== null ? `${w.position} of ${w.queue_length}` : "";
    const last = w.last_preemption;
    const note = last ? `<div class="preempted-note">preempted at ${clock(last.at)}: ${esc(last.why)}</div>` : "";
    return `<tr class="wl" data-workload="${esc(w.id)}" data-state="${esc(w.state)}"${w.position !== null ? ` data-position="${w.position}"` : ""}>
      <td><b>${esc(w.name)}</b>${w.name !== w.id ? `<div class="muted">${esc(w.id)}</div>` : ""}</td>
      <td><span class="badge state-${esc(w.state)}">${esc(w.state)}</span></td>
      <td>${esc(w.queue)}</td><td class="num">${w.priority}</td>
      <td>${line}</td><td>${dur(w.waiting_s)}</td>${startsCell(w)}<td class="num">${num(w.gpus)}</td>
      <td class="num">${w.preemptions || ""}</td><td class="reason">${esc(w.reason)}${note}</td></tr>`;
  }

  // The Starts cell: the forecast start counted from the moment the board was made (in_s,
  // as waiting_s is), so Waiting and Starts never disagree with each other; the title holds
  // the whole sentence, which for "unknown" says what blocks the forecast.
  function startsCell(w) {
    const eta = w.state === "Queued" ? w.eta : null;
    if (!eta) return `<td class="starts"></td>`;
    const known = eta.at !== null && eta.in_s !== null;
    const shown = known ? `~${span(eta.in_s)}` : "unknown";
    return `<td class="starts${known ? "" : " unknown"}" title="${esc(eta.text)}">${shown}</td>`;
  }

  // Under the reason it waits for: when it is forecast to start, or why that cannot be said.
  function etaLine(w) {
    if (w.state !== "Queued" || !w.eta) return "";
    return `<p id="detail-eta" class="eta"><b>Estimated start:</b> ${esc(w.eta.text)}</p>`;
  }

  async function showDetail(id) {
    S.detail = id;
    const panel = $("#detail");
    let w;
    try { w = await get(`api/v1/workloads/${encodeURIComponent(id)}`); } catch (e) { panel.hidden = true; return; }
    const rows = w.history.map((h) => `<tr class="${h.to === "Preempting" ? "preempted" : ""}">
      <td>${clock(h.at)}</td><td>${esc(h.from || "–")} → ${esc(h.to)}</td><td>${esc(h.why)}</td></tr>`).join("");
    panel.innerHTML = `<button id="detail-close" style="float:right">close</button>
      <h3>${esc(w.name)}</h3><dl>
      <dt>id</dt><dd>${esc(w.id)}</dd><dt>state</dt><dd><span class="badge state-${esc(w.state)}">${esc(w.state)}</span></dd>
      <dt>queue</dt><dd>${esc(w.queue)}</dd><dt>priority</dt><dd>${w.priority} (${esc(w.priority_class)}${w.preemptible ? ", preemptible" : ""})</dd>
      <dt>in line</dt><dd>${w.position !== null ? `${w.position} of ${w.queue_length}` : "–"}</dd>
      <dt>workers</dt><dd>${w.workers} (gang ${w.min_workers}, at most ${w.max_workers}; ${num(w.gpus_per_worker)} GPU each)</dd>
      <dt>GPU types</dt><dd>${w.gpu_types.length ? esc(w.gpu_types.join(", ")) + " (in this order)" : "any"}</dd>
      <dt>why</dt><dd>${esc(w.reason)}</dd><dt>preempted</dt><dd>${w.preemptions} time${w.preemptions === 1 ? "" : "s"}</dd>
      </dl>${etaLine(w)}<h4>History</h4><table id="history"><tbody>${rows}</tbody></table>`;
    panel.hidden = false;
    $("#detail-close").addEventListener("click", () => { S.detail = null; panel.hidden = true; });
  }

  // ------------------------------------------------------------ nodes
  const NodesPage = {
    mount() {
      main.innerHTML = `<h2>Nodes</h2><div class="legend" id="node-legend"></div><div id="node-groups"></div>`;
    },
    async update() {
      const data = await get("api/v1/nodes");
      const groups = new Map();
      for (const n of data.items) {
        const key = data.levels.length ? data.levels.map((l, i) => `${l}=${n.domain[i] || "?"}`).join(" / ") : "all nodes";
        if (!groups.has(key)) groups.set(key, []);
        groups.get(key).push(n);
      }
      const queues = new Set();
      const html = [];
      for (const [key, nodes] of [...groups.entries()].sort()) {
        const gpus = nodes.reduce((a, n) => a + n.gpus, 0);
        const used = nodes.reduce((a, n) => a + n.gpu_used, 0);
        html.push(`<div class="group" data-domain="${esc(key)}"><h3>${esc(key)} · ${num(used)} of ${gpus} GPUs held</h3><div class="nodes">`);
        for (const n of nodes) html.push(nodeCard(n, queues));
        html.push("</div></div>");
      }
      $("#node-groups").innerHTML = html.join("");
      $("#node-legend").innerHTML = [...queues].sort().map((q) => `<span><i style="background:${hue(q)}"></i>${esc(q)}</span>`).join("") +
        `<span><i style="background:var(--outside)"></i>held outside kai-ray</span>`;
    },
  };

  function nodeCard(n, queues) {
    const cells = n.devices.map((d) => {
      const segs = d.shares.map((s) => { queues.add(s.queue); return `<i style="height:${100 * s.fraction}%;background:${hue(s.queue)}"></i>`; }).join("");
      const title = `GPU ${d.index}: ` + (d.shares.map((s) => `${s.workload} (${s.queue}) ${num(s.fraction)}`).join(", ") || "free") +
        (d.outside ? `; ${num(d.outside)} held outside kai-ray` : "");
      return `<span class="gpu" data-used="${d.used}" title="${esc(title)}">${segs}${d.outside ? `<i class="outside" style="height:${100 * d.outside}%"></i>` : ""}</span>`;
    }).join("");
    const typed = n.gpus && n.gpu_type && n.gpu_type !== "default" ? n.gpu_type : "";
    return `<div class="node${n.unschedulable ? " cordoned" : ""}" data-node="${esc(n.id)}" data-gpu-type="${esc(typed)}" title="${esc(n.gpu_model || typed)}">
      <div class="nm">${esc(n.name)}${typed ? ` · ${esc(typed)}` : ""} · ${num(n.gpu_used)}/${n.gpus}${n.unschedulable ? " · cordoned" : ""}</div>
      ${n.gpus ? `<div class="gpus">${cells}</div>` : `<div class="muted">${num(n.cpu_used)}/${num(n.cpu)} CPU</div>`}</div>`;
  }

  // ------------------------------------------------------------ timeline
  const TimelinePage = {
    mount() {
      main.innerHTML = `<h2>GPUs allocated per queue</h2><div class="controls"><label class="muted">last
        <select id="hours">${[1, 3, 6].map((h) => `<option value="${h}"${h === S.hours ? " selected" : ""}>${h} h</option>`).join("")}</select></label>
        <span class="legend" id="tl-legend"></span></div><div id="chart"></div>`;
      $("#hours").addEventListener("change", (e) => { S.hours = Number(e.target.value); refresh(); });
    },
    async update() {
      const data = await get(`api/v1/timeline?hours=${S.hours}&top=12`);
      const names = Object.keys(data.series);
      $("#tl-legend").innerHTML = names.map((q) => `<span><i style="background:${q === "other" ? "var(--outside)" : hue(q)}"></i>${esc(q)}</span>`).join("");
      $("#chart").innerHTML = stackedChart(data.times, names.map((q) => data.series[q]), names);
    },
  };

  function stackedChart(times, series, names) {
    const W = 960, H = 320, L = 44, B = 24;
    if (!times.length) return `<p class="muted">No cycles recorded yet.</p>`;
    const tot = times.map((_, i) => series.reduce((a, s) => a + s[i], 0));
    const ymax = Math.max(1, ...tot);
    const t0 = times[0], t1 = Math.max(times[times.length - 1], t0 + 1);
    const x = (t) => L + ((W - L - 8) * (t - t0)) / (t1 - t0);
    const y = (v) => H - B - ((H - B - 8) * v) / ymax;
    const base = times.map(() => 0);
    const paths = series.map((s, k) => {
      const lo = base.slice();
      for (let i = 0; i < s.length; i++) base[i] += s[i];
      const up = times.map((t, i) => `${x(t).toFixed(1)},${y(base[i]).toFixed(1)}`);
      const down = times.map((t, i) => `${x(t).toFixed(1)},${y(lo[i]).toFixed(1)}`).reverse();
      const fill = names[k] === "other" ? "#9ca3af" : hue(names[k]);
      return `<polygon data-series="${esc(names[k])}" points="${up.concat(down).join(" ")}" fill="${fill}" fill-opacity="0.85"><title>${esc(names[k])}</title></polygon>`;
    });
    const ticks = [0, 0.5, 1].map((f) => `<text x="${L - 6}" y="${y(ymax * f) + 4}" text-anchor="end">${num(ymax * f)}</text>`);
    const xt = [t0, (t0 + t1) / 2, t1].map((t) => `<text x="${x(t)}" y="${H - 6}" text-anchor="middle">${clock(t)}</text>`);
    return `<svg width="${W}" height="${H}" role="img" aria-label="GPUs allocated per queue">
      <line x1="${L}" y1="${H - B}" x2="${W - 8}" y2="${H - B}" stroke="#cbd5e1"/>${paths.join("")}${ticks.join("")}${xt.join("")}</svg>`;
  }

  // ------------------------------------------------------------ the frame
  const PAGES = { queues: QueuesPage, workloads: WorkloadsPage, nodes: NodesPage, timeline: TimelinePage };
  let busy = false, again = false;

  async function summary() {
    const s = await get("api/v1/summary");
    const states = Object.entries(s.workloads).map(([k, v]) => `${v} ${k.toLowerCase()}`).join(", ");
    const n = s.over_share.length;
    const names = s.over_share.slice(0, 3).join(", ") + (n > 3 ? `, and ${n - 3} more` : "");
    const over = n ? ` · over fair share: ${names}` : "";
    $("#summary").textContent = `${s.backend} · ${num(s.gpus_used)} of ${s.gpus} GPUs held · ${states || "no workloads"}${over}`;
    const st = s.status, banner = $("#status");  // null: a scheduler that always schedules
    banner.hidden = !st || st.scheduling;
    if (st && !st.scheduling) banner.textContent = `Not scheduling: ${st.detail}`;
    return s.revision;
  }

  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      do {
        again = false;
        const page = (location.hash.replace(/^#\/?/, "") || "queues").split("?")[0];
        const target = PAGES[page] ? page : "queues";
        const t0 = performance.now();
        if (S.page !== target) {
          S.page = target;
          document.body.dataset.rendered = "";
          for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === target);
          PAGES[target].mount();
        }
        try {
          const [rev] = await Promise.all([summary(), PAGES[target].update()]);
          if (S.detail) await showDetail(S.detail);
          S.revision = Math.max(S.revision, rev);
          document.body.dataset.revision = String(S.revision);
          document.body.dataset.rendered = target;
          window.kaiRayRender = { page: target, ms: performance.now() - t0 };
        } catch (e) {
          main.insertAdjacentHTML("afterbegin", `<p class="error">${esc(e.message)}</p>`);
        }
      } while (again);
    } finally { busy = false; }
  }

  function live() {
    const badge = $("#live");
    let failures = 0;
    const es = new EventSource("api/v1/stream");
    es.onopen = () => { failures = 0; badge.className = "on"; badge.textContent = "live"; };
    es.onmessage = (e) => {
      const rev = JSON.parse(e.data).revision;
      badge.className = "on";
      badge.textContent = `live · ${new Date().toLocaleTimeString()}`;
      if (rev !== S.revision) refresh();
    };
    es.onerror = () => {
      badge.className = "";
      badge.textContent = "reconnecting…";
      if (++failures > 3) {  // no stream (a proxy that buffers it): ask every two seconds
        es.close();
        setInterval(async () => { if ((await summary()) !== S.revision) refresh(); }, 2000);
      }
    };
  }

  window.addEventListener("hashchange", refresh);
  refresh();
  live();
})();
