// infless live board. Reads the gateway's event stream (/ui/events: a history, then one
// snapshot per interval) and draws servers, instances and each function's SLO. A function's
// detail comes from /ui/function/NAME while it is open. Drawing helpers: draw.js. No
// framework, no build step.
"use strict";

const state = { fields: [], series: {}, snapshot: null, keep: 300, open: null, detailAt: 0 };
const DETAIL_EVERY_MS = 2000;

function last(values) {
  for (let i = values.length - 1; i >= 0; i -= 1) if (values[i] !== null) return values[i];
  return null;
}
function column(name, field) {
  const s = state.series[name];
  return s && s[field] ? s[field] : [];
}

// -- the stream -------------------------------------------------------------------------
function connect() {
  const link = document.getElementById("link");
  const events = new EventSource("/ui/events");
  events.addEventListener("open", () => { link.dataset.state = "live"; link.textContent = "live"; });
  events.addEventListener("error", () => {
    link.dataset.state = "lost";
    link.textContent = "reconnecting…";
  });
  events.addEventListener("history", (e) => {
    const data = JSON.parse(e.data);
    state.fields = data.fields;
    state.series = data.series;
  });
  events.addEventListener("snapshot", (e) => {
    const snap = JSON.parse(e.data);
    state.fields = snap.fields;
    state.keep = snap.historyPoints || state.keep;
    append(snap.points);
    state.snapshot = snap;
    document.body.dataset.ticks = String(Number(document.body.dataset.ticks) + 1);
    render();
  });
}

function append(points) {
  for (const [name, point] of Object.entries(points)) {
    const s = state.series[name] || (state.series[name] = {});
    state.fields.forEach((field, i) => {
      const values = s[field] || (s[field] = []);
      if (field === "t" && values.length && values[values.length - 1] === point[i]) return;
      values.push(point[i]);
      if (values.length > state.keep) values.splice(0, values.length - state.keep);
    });
  }
  for (const name of Object.keys(state.series)) if (!(name in points)) delete state.series[name];
}

// -- servers ----------------------------------------------------------------------------
function instanceLabel(i) {
  return i.variant ? `${i.model} · ${i.variant}` : i.function;
}
function instanceBlock(i) {
  const width = 92 + 56 * (Math.max(1, i.cpus) - 1);
  const height = 46 + Math.round(0.5 * (i.gpuPct || 0));
  const shape = `b${i.batchSize} c${i.cpus}` + (i.gpuPct ? ` g${i.gpuPct}%` : "");
  const title = `${i.id}\n${i.state} on ${i.server}, cores ${i.cpuIds.join(",")}` +
    (i.gpuIndex !== null && i.gpuIndex !== undefined ? `, GPU ${i.gpuIndex}` : "") +
    `\nserved ${i.served}, share ${i.shareRps} rps` + (i.error ? `\n${i.error}` : "");
  return h("div", {
    class: `block state-${i.state}`,
    style: { width: `${width}px`, height: `${height}px`, borderLeft: `5px solid ${hue(i.function)}` },
    title, "data-instance": i.id, "data-function": i.function, "data-state": i.state,
    onclick: () => openDetail(i.function),
  },
  h("div", { class: "fn" }, instanceLabel(i)),
  h("div", {}, shape),
  i.queue ? h("span", { class: "q" }, `q ${i.queue}`) : null);
}
function keptBlock(w) {
  const standby = w.state === "standby";
  const what = standby ? `GPU ${w.gpuIndex} · ${w.sharePct}%` : w.function;
  const since = standby ? w.standbyS : w.idleS;
  return h("div", {
    class: `block kept state-${w.state}`, style: { width: "120px", height: "46px" },
    title: `${w.id} (pid ${w.pid}), ${w.state} for ${fmt(since, 0)} s`,
    "data-kept": w.id, "data-state": w.state,
  }, h("div", { class: "fn" }, w.state), h("div", {}, `${what} · ${fmt(since, 0)} s`));
}
function coreStrip(server, instances) {
  const on = {};
  for (const i of instances) for (const core of i.cpuIds) (on[core] = on[core] || []).push(i);
  return h("div", { class: "cores", title: "cores: coloured by the functions running there" },
    server.cores.map(([core]) => {
      const here = on[core] || [];
      const colours = here.map((i) => hue(i.function));
      const step = 100 / Math.max(1, colours.length);
      const background = colours.length > 1
        ? `linear-gradient(90deg, ${colours.map((c, k) => `${c} ${k * step}% ${(k + 1) * step}%`).join(", ")})`
        : colours[0];
      return h("div", {
        class: here.length ? "core used" : "core", style: here.length ? { background } : {},
        title: here.length ? `core ${core}: ${here.map((i) => i.id).join(", ")}` : `core ${core}: free`,
      }, core);
    }));
}
function gpuBars(server, instances) {
  return server.gpuPct.map((capacity, index) => {
    const on = instances.filter((i) => i.gpuIndex === index && i.gpuPct > 0);
    const info = (server.gpus || []).find((g) => g.index === index) || {};
    const sharing = info.sharing ? info.sharing.mode : "";
    return h("div", { class: "gpu" },
      h("div", { class: "facts" },
        `GPU ${index}${info.name ? ` ${info.name}` : ""} · ${sharing || "share"} · free `,
        h("b", {}, `${server.freeGpuPct[index]}%`),
        info.standby !== undefined ? ` · standby ${info.standby}` : ""),
      h("div", { class: "gpu-bar" }, on.map((i) => h("span", {
        style: { width: `${(100 * i.gpuPct) / capacity}%`, background: hue(i.function) },
        title: `${i.function} ${i.gpuPct}% (${i.id})`,
      }))));
  });
}
function storeChips(store) {
  if (!store) return null;
  const tenants = Object.entries(store.tenantBytes || {});
  return h("div", { class: "store", title: "the tensor store: weights shared by instances" },
    h("span", {}, `store ${bytes(store.bytes)}`),
    tenants.map(([tenant, n]) => h("span", {}, `${tenant}: ${bytes(n)}`)));
}
function serverCard(server, snap) {
  const instances = snap.instances.filter((i) => i.server === server.id);
  const kept = snap.kept.filter((w) => w.server === server.id);
  const where = server.describe.host ? ` (${server.describe.host})` : "";
  return h("div", { class: "server", "data-server": server.id },
    h("div", { class: "server-head" },
      h("span", { class: "name" }, `${server.id}${where}`),
      h("span", { class: "facts" }, "cores ", h("b", {}, `${server.cpus - server.freeCpus}`),
        ` of ${server.cpus} planned · ${instances.length} instances · ${kept.length} kept`)),
    coreStrip(server, instances),
    gpuBars(server, instances),
    h("div", { class: "blocks" },
      instances.length || kept.length
        ? [...instances.map(instanceBlock), ...kept.map(keptBlock)]
        : h("span", { class: "empty" }, "no instance")),
    storeChips(server.store));
}

// -- functions --------------------------------------------------------------------------
function functionCard(fn) {
  const t = column(fn.name, "t");
  const offered = column(fn.name, "offeredRps");
  const served = column(fn.name, "servedRps");
  const refused = column(fn.name, "refusedRps");
  const p50 = column(fn.name, "p50Ms");
  const p99 = column(fn.name, "p99Ms");
  const queue = column(fn.name, "queue");
  const ready = column(fn.name, "instances");
  const cold = column(fn.name, "coldStarts").reduce((a, v) => a + (v || 0), 0);
  const p99now = last(p99);
  const rates = h("canvas", { class: "chart" });
  const latency = h("canvas", { class: "chart" });
  const load = h("canvas", { class: "chart" });
  const card = h("div", {
    class: `function${state.open === fn.name ? " open" : ""}`, "data-function": fn.name,
    "data-offered": last(offered) ?? 0, "data-served": last(served) ?? 0,
    "data-ready": fn.ready, onclick: () => openDetail(fn.name),
  },
  h("div", { class: "function-head" },
    h("span", { class: "name" }, fn.name),
    h("span", { class: `badge state-${fn.state === "failed" ? "failed" : fn.state}` }, fn.state),
    h("span", { class: "facts" }, `SLO ${fmt(fn.sloMs, 0)} ms · ${fn.ready}/${fn.wanted} ready · ${fn.owner}`)),
  h("div", { class: "numbers" },
    h("div", {}, "offered/s", h("b", {}, fmt(last(offered)))),
    h("div", {}, "served/s", h("b", {}, fmt(last(served)))),
    h("div", {}, "429/s", h("b", {}, fmt(last(refused)))),
    h("div", {}, "p99 ms", h("b", { class: p99now !== null && p99now > fn.sloMs ? "over" : "" }, fmt(p99now))),
    h("div", {}, "p50 ms", h("b", {}, fmt(last(p50)))),
    h("div", {}, "queue", h("b", {}, fmt(last(queue), 0))),
    h("div", {}, "cold starts", h("b", {}, cold)),
    h("div", {}, "instances", h("b", {}, fmt(last(ready), 0)))),
  legend([["offered", css("--offered")], ["served", css("--served")], ["429", css("--refused")]]),
  rates,
  legend([["p50", css("--p50")], ["p99", css("--p99")], ["SLO", css("--slo")]]),
  latency,
  legend([["queue", css("--draining")], ["ready instances", css("--ready")]]),
  load,
  fn.lastError ? h("div", { class: "facts" }, `last error: ${fn.lastError}`) : null);
  requestAnimationFrame(() => {
    chart(rates, t, [
      { values: offered, color: css("--offered") },
      { values: served, color: css("--served") },
      { values: refused, color: css("--refused") },
    ]);
    chart(latency, t, [
      { values: p50, color: css("--p50") }, { values: p99, color: css("--p99") },
    ], { line: fn.sloMs });
    chart(load, t, [
      { values: queue, color: css("--draining") }, { values: ready, color: css("--ready") },
    ]);
  });
  return card;
}

function modelCard(m) {
  return h("div", { class: "model", "data-model": m.model },
    h("div", { class: "function-head" }, h("span", { class: "name" }, m.model),
      h("span", { class: "facts" }, `SLO ${fmt(m.sloMs, 0)} ms · target ${m.target || "–"} · ${m.switches} switches`)),
    h("table", {},
      h("tr", {}, h("th", {}, "variant"), h("th", {}, "state"), h("th", {}, "served")),
      m.variants.map((v) => h("tr", { class: v.name === m.target ? "target" : "" },
        h("td", {}, v.name + (v.released ? " (released)" : "")),
        h("td", {}, v.state || "–"), h("td", { class: "num" }, v.served)))));
}

// -- detail -----------------------------------------------------------------------------
function openDetail(name) {
  state.open = name;
  state.detailAt = 0;
  document.getElementById("detail").hidden = false;
  document.getElementById("detail").dataset.function = name;
  document.getElementById("detail-title").textContent = name;
  refreshDetail();
}
function closeDetail() {
  state.open = null;
  document.getElementById("detail").hidden = true;
}
async function refreshDetail() {
  const name = state.open;
  if (!name || Date.now() - state.detailAt < DETAIL_EVERY_MS) return;
  state.detailAt = Date.now();
  const reply = await fetch(`/ui/function/${encodeURIComponent(name)}`);
  if (state.open !== name) return;
  const body = document.getElementById("detail-body");
  if (!reply.ok) {
    body.replaceChildren(h("p", {}, `${reply.status}: ${(await reply.json()).error}`));
    return;
  }
  renderDetail(await reply.json());
}
function keyValues(pairs) {
  return h("table", {}, pairs.filter(([, v]) => v !== undefined).map(([k, v]) =>
    h("tr", {}, h("th", {}, k), h("td", {}, v === null ? "–" : String(v)))));
}
function renderDetail(d) {
  const a = d.admission || {};
  const p = d.planner || {};
  const parts = [
    h("h3", {}, "Admission and planner"),
    keyValues([["capacity rps", a.capacityRps], ["budget ms", a.budgetMs],
      ["measured p99 ms", a.p99Ms], ["refused", a.refused], ["owner", d.function.owner],
      ["demand rps", p.demandRps], ["regime", p.regime], ["unmet rps", p.unmetRps]]),
    h("h3", {}, "Batches: measured against the service-time table"),
    legend([["served batches", css("--served")], ["mean", css("--p50")],
      ["tail", css("--p99")], ["worker forward", css("--idle")]]),
  ];
  for (const i of d.instances) {
    parts.push(h("div", { class: "facts" }, `${i.id} · b${i.batchSize} c${i.cpus}` +
      (i.gpuPct ? ` g${i.gpuPct}%` : "") + ` · ${i.state} · tail ratio ${fmt(i.tailRatio, 2)}`));
    parts.push(batchChart(i));
  }
  if (!d.instances.length) parts.push(h("p", { class: "empty" }, "no instance"));
  if (d.variants) {
    const v = d.variants;
    parts.push(h("h3", {}, `Variants of ${v.model} (target ${v.target || "–"})`));
    parts.push(h("table", {},
      h("tr", {}, ["variant", "status", "state", "accuracy", "config", "served"].map((c) => h("th", {}, c))),
      (v.variants || []).map((row) => h("tr", { class: row.name === v.target ? "target" : "" },
        h("td", {}, row.name), h("td", {}, row.status), h("td", {}, row.state || "–"),
        h("td", { class: "num" }, fmt(row.accuracy, 4)),
        h("td", {}, row.config ? `b${row.config.batchSize} c${row.config.cpus}` : "–"),
        h("td", { class: "num" }, row.served ?? "–")))));
  }
  parts.push(h("h3", {}, "Recent logs"));
  parts.push(h("pre", { class: "logs" }, d.logs.length
    ? d.logs.map((l) => `${new Date(l.t * 1000).toISOString().slice(11, 23)} ${l.instance} ${l.text}`).join("\n")
    : "(none)"));
  document.getElementById("detail-body").replaceChildren(...parts);
}

// -- the page ---------------------------------------------------------------------------
function render() {
  const snap = state.snapshot;
  if (!snap) return;
  const ready = snap.instances.filter((i) => i.state === "ready").length;
  document.getElementById("summary").replaceChildren(
    h("b", {}, snap.servers.length), " servers · ", h("b", {}, ready), ` of ${snap.instances.length} instances ready · `,
    h("b", {}, snap.functions.length), " functions · ",
    new Date(snap.t * 1000).toLocaleTimeString());
  document.getElementById("servers").replaceChildren(...snap.servers.map((s) => serverCard(s, snap)));
  document.getElementById("functions").replaceChildren(...snap.functions.map(functionCard));
  document.getElementById("models-section").hidden = !snap.models.length;
  document.getElementById("models").replaceChildren(...snap.models.map(modelCard));
  if (state.open) refreshDetail();
}

document.getElementById("detail-close").addEventListener("click", closeDetail);
document.addEventListener("keydown", (e) => { if (e.key === "Escape") closeDetail(); });
connect();
