// infless live board: drawing helpers (DOM building, numbers, colours, canvas charts),
// loaded before board.js. No framework, no build step.
"use strict";

// -- small helpers ----------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "style") Object.assign(el.style, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key.startsWith("data-")) el.dataset[camel(key.slice(5))] = value;
    else el.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}
function camel(name) { return name.replace(/-([a-z])/g, (_, c) => c.toUpperCase()); }
function fmt(value, digits = 1) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  return Number(value).toFixed(digits);
}
function bytes(n) {
  if (!n) return "0 B";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}
function hue(name) {
  let x = 0;
  for (const c of name) x = (x * 31 + c.charCodeAt(0)) >>> 0;
  return `hsl(${x % 360} 55% 48%)`;
}
// -- charts -----------------------------------------------------------------------------
function chart(canvas, times, lines, opts = {}) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 300;
  const height = canvas.clientHeight || 86;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.clearRect(0, 0, width, height);
  const values = lines.flatMap((l) => l.values).filter((v) => v !== null);
  let top = Math.max(opts.min || 1, ...values, opts.line || 0) * 1.1;
  if (!Number.isFinite(top)) top = 1;
  const t0 = times.length ? times[0] : 0;
  const span = Math.max(1, (times.length ? times[times.length - 1] : 1) - t0);
  const x = (t) => 30 + ((t - t0) / span) * (width - 34);
  const y = (v) => height - 12 - (v / top) * (height - 18);
  g.strokeStyle = "#dde1e6";
  g.fillStyle = "#66707c";
  g.font = "10px system-ui";
  g.lineWidth = 1;
  g.beginPath(); g.moveTo(30, y(0)); g.lineTo(width - 4, y(0)); g.stroke();
  g.fillText(fmt(top / 1.1, top < 10 ? 1 : 0), 0, 12);
  g.fillText("0", 18, y(0) + 3);
  if (opts.line) {
    g.strokeStyle = getComputedStyle(document.body).getPropertyValue("--slo");
    g.setLineDash([4, 3]);
    g.beginPath(); g.moveTo(30, y(opts.line)); g.lineTo(width - 4, y(opts.line)); g.stroke();
    g.setLineDash([]);
  }
  for (const line of lines) {
    g.strokeStyle = line.color;
    g.fillStyle = line.color;
    g.lineWidth = 1.6;
    g.beginPath();
    let pen = false;
    line.values.forEach((v, i) => {
      if (v === null || times[i] === undefined) { pen = false; return; }
      if (pen) g.lineTo(x(times[i]), y(v)); else g.moveTo(x(times[i]), y(v));
      pen = true;
    });
    g.stroke();
    line.values.forEach((v, i) => {  // a point with no neighbour shows as a dot
      const alone = v !== null && (line.values[i - 1] ?? null) === null && (line.values[i + 1] ?? null) === null;
      if (alone && times[i] !== undefined) { g.beginPath(); g.arc(x(times[i]), y(v), 2, 0, 6.3); g.fill(); }
    });
  }
}
function css(name) { return getComputedStyle(document.body).getPropertyValue(name).trim(); }
function legend(items) {
  return h("div", { class: "chart-label" },
    items.map(([label, color]) => h("span", {}, h("i", { style: { background: color } }), label)));
}

// a function's instance: its recent batches against its service-time table
function batchChart(instance) {
  const canvas = h("canvas", { class: "batches" });
  requestAnimationFrame(() => {
    const sizes = Object.keys(instance.meanMsByBatch).map(Number);
    const recent = instance.recent;
    const maxB = Math.max(1, ...sizes, ...recent.map((r) => r[0]));
    const all = [...Object.values(instance.tailMsByBatch), ...recent.map((r) => r[1]),
      ...Object.values(instance.execMsByBatch)];
    const top = Math.max(1, ...all) * 1.1;
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 500;
    const height = canvas.clientHeight || 180;
    canvas.width = width * ratio;
    canvas.height = height * ratio;
    const g = canvas.getContext("2d");
    g.scale(ratio, ratio);
    const x = (b) => 34 + ((b - 1) / Math.max(1, maxB - 1)) * (width - 44);
    const y = (ms) => height - 16 - (ms / top) * (height - 24);
    g.fillStyle = "#66707c";
    g.font = "10px system-ui";
    g.fillText(`${fmt(top / 1.1)} ms`, 0, 10);
    g.fillText("x: batch size", width - 70, 10);
    for (const b of new Set([1, ...sizes, maxB])) g.fillText(String(b), x(b) - 3, height - 4);
    const table = (t, color, dash) => {
      const pts = Object.entries(t).map(([b, ms]) => [Number(b), ms]).sort((a, b) => a[0] - b[0]);
      g.strokeStyle = color; g.setLineDash(dash); g.lineWidth = 1.5; g.beginPath();
      pts.forEach(([b, ms], i) => (i ? g.lineTo(x(b), y(ms)) : g.moveTo(x(b), y(ms))));
      g.stroke(); g.setLineDash([]);
    };
    table(instance.meanMsByBatch, css("--p50"), []);
    table(instance.tailMsByBatch, css("--p99"), [5, 3]);
    table(instance.execMsByBatch, css("--idle"), [2, 2]);
    g.fillStyle = css("--served");
    for (const [b, ms] of recent) { g.beginPath(); g.arc(x(b), y(ms), 2.5, 0, 6.3); g.fill(); }
  });
  return canvas;
}
