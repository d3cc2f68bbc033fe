// Canopy's status page: polls /api/status (the cluster's nodes and ranges)
// and /api/metrics (this node's traffic) and draws them. No library.
"use strict";

const STATUS_EVERY_MS = 5000;
const METRICS_EVERY_MS = 2000;

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function bytes(n) {
  if (!n) return "0 B";
  const u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + u[i];
}

function duration(s) {
  if (!s) return "–";
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  if (d) return d + "d " + h + "h";
  if (h) return h + "h " + m + "m";
  if (m) return m + "m " + (s % 60) + "s";
  return s + "s";
}

function banner(msg) {
  const b = $("banner");
  b.hidden = !msg;
  b.textContent = msg || "";
}

function setCard(id, v, bad) {
  const e = $(id);
  e.textContent = v;
  e.classList.toggle("bad", !!bad);
}

function renderStatus(st) {
  $("cluster").textContent = "cluster " + st.cluster_id;
  const live = st.nodes.filter(n => n.live).length;
  setCard("c-nodes", live + " / " + st.nodes.length, live < st.nodes.length);
  setCard("c-ranges", st.ranges.length);
  setCard("c-under", st.under_replicated_ranges, st.under_replicated_ranges > 0);
  setCard("c-unavail", st.unavailable_ranges, st.unavailable_ranges > 0);
  setCard("c-rf", st.replication_factor);
  setCard("c-enc", st.status_encoding);

  const nb = $("nodes").tBodies[0];
  nb.replaceChildren();
  for (const n of st.nodes) {
    const tr = el("tr");
    tr.dataset.nodeId = n.node_id;
    tr.append(el("td", "n" + n.node_id), el("td", n.address));
    const state = el("td", n.live ? "live" : "unreachable", n.live ? "ok" : "bad");
    if (n.error) state.title = n.error;
    tr.append(state, el("td", n.membership), el("td", n.version || "–"),
      el("td", n.live ? duration(n.uptime_seconds) : "–"),
      el("td", n.live ? bytes(n.store_bytes) : "–", "num"),
      el("td", n.live ? n.ranges : "–", "num"), el("td", n.live ? n.leaseholder_of : "–", "num"));
    nb.append(tr);
  }

  $("keys-note").hidden = !st.keys_hidden;
  const rb = $("ranges").tBodies[0];
  rb.replaceChildren();
  for (const r of st.ranges) {
    const tr = el("tr");
    tr.dataset.rangeId = r.range_id;
    let state = "ok", cls = "ok";
    if (r.unavailable) { state = "unavailable: " + r.unavailable; cls = "bad"; }
    else if (r.under_replicated) { state = "under-replicated: " + r.under_replicated; cls = "warn"; }
    const lag = r.followers.map(f => "n" + f.node_id + ": " + f.lag + (f.ok ? "" : " (" + f.state + ")") + (f.learner ? " (learner)" : "")).join(", ");
    const start = el("td", r.start, "key"), end = el("td", r.end, "key");
    start.title = r.start; end.title = r.end;
    tr.append(el("td", "r" + r.range_id), start, end,
      el("td", r.replicas.map(id => "n" + id).join(", ")),
      el("td", r.leaseholder ? "n" + r.leaseholder : "unknown"),
      el("td", r.approx_bytes ? bytes(r.approx_bytes) : "–", "num"),
      el("td", lag || "–"), el("td", state, cls));
    rb.append(tr);
  }
  document.body.dataset.statusRendered = String(st.time_unix_ms);
}

async function fetchJSON(path) {
  const resp = await fetch(path, {cache: "no-store"});
  let body;
  try { body = await resp.json(); } catch (e) { throw new Error(path + ": HTTP " + resp.status); }
  return [resp, body];
}

async function pollStatus() {
  try {
    const [resp, st] = await fetchJSON("/api/status");
    $("served").textContent = st.served_by ? "served by n" + st.served_by : "";
    if (!resp.ok || st.error) {
      banner("The cluster's status could not be gathered: " + (st.error || "HTTP " + resp.status));
      document.body.dataset.statusError = st.error || String(resp.status);
    } else {
      banner("");
      renderStatus(st);
    }
  } catch (e) {
    banner("This node does not answer: " + e.message);
  }
  setTimeout(pollStatus, STATUS_EVERY_MS);
}

// A line chart on a canvas: series = [{name, color, values}], xs in ms.
function drawChart(canvas, legend, xs, series, unit) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
  if (canvas.width !== w * dpr) { canvas.width = w * dpr; canvas.height = h * dpr; }
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const left = 48, right = 8, top = 8, bottom = 20;
  const pw = w - left - right, ph = h - top - bottom;
  let ymax = 0;
  for (const s of series) for (const v of s.values) if (v !== null && v > ymax) ymax = v;
  ymax = niceCeil(ymax);
  const x0 = xs.length ? xs[0] : 0, x1 = xs.length ? xs[xs.length - 1] : 1;
  const X = t => left + (x1 > x0 ? (t - x0) / (x1 - x0) : 1) * pw;
  const Y = v => top + ph - (v / ymax) * ph;
  g.font = "11px system-ui, sans-serif";
  g.strokeStyle = "#e3e6e8"; g.fillStyle = "#667"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4, y = Y(v);
    g.beginPath(); g.moveTo(left, y); g.lineTo(left + pw, y); g.stroke();
    g.textAlign = "right"; g.textBaseline = "middle";
    g.fillText(fmt(v), left - 5, y);
  }
  g.textAlign = "left"; g.textBaseline = "top";
  if (xs.length) {
    g.fillText(new Date(x0).toLocaleTimeString(), left, top + ph + 4);
    g.textAlign = "right";
    g.fillText(new Date(x1).toLocaleTimeString(), left + pw, top + ph + 4);
  } else {
    g.textAlign = "center"; g.textBaseline = "middle";
    g.fillText("no data yet", left + pw / 2, top + ph / 2);
  }
  for (const s of series) {
    g.strokeStyle = s.color; g.lineWidth = 1.6;
    g.beginPath();
    let pen = false;
    s.values.forEach((v, i) => {
      if (v === null) { pen = false; return; }
      if (pen) g.lineTo(X(xs[i]), Y(v)); else g.moveTo(X(xs[i]), Y(v));
      pen = true;
    });
    g.stroke();
  }
  legend.replaceChildren();
  for (const s of series) {
    const last = s.values.length ? s.values[s.values.length - 1] : null;
    const sp = el("span");
    const sw = el("i"); sw.style.background = s.color;
    sp.append(sw, document.createTextNode(s.name + " " + (last === null ? "–" : fmt(last) + unit)));
    legend.append(sp);
  }
}

function niceCeil(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function fmt(v) {
  if (v === null || v === undefined) return "–";
  if (v >= 100) return v.toFixed(0);
  if (v >= 10) return v.toFixed(1);
  return v.toFixed(2).replace(/\.?0+$/, "") || "0";
}

async function pollMetrics() {
  try {
    const [resp, m] = await fetchJSON("/api/metrics");
    if (resp.ok) {
      const xs = m.points.map(p => p.t);
      const col = k => m.points.map(p => p[k]);
      drawChart($("chart-throughput"), $("legend-throughput"), xs, [
        {name: "requests", color: "#1565c0", values: col("requests_per_s")},
        {name: "batches", color: "#8e24aa", values: col("batches_per_s")}], "/s");
      drawChart($("chart-latency"), $("legend-latency"), xs, [
        {name: "p50", color: "#2e7d32", values: col("p50_ms")},
        {name: "p99", color: "#ef6c00", values: col("p99_ms")}], " ms");
      drawChart($("chart-txn"), $("legend-txn"), xs, [
        {name: "committed", color: "#2e7d32", values: col("committed_per_s")},
        {name: "aborted", color: "#c62828", values: col("aborted_per_s")},
        {name: "conflicts", color: "#f9a825", values: col("conflicts_per_s")}], "/s");
      document.body.dataset.metricsPoints = String(m.points.length);
    }
  } catch (e) {
    // pollStatus reports an unreachable node.
  }
  setTimeout(pollMetrics, METRICS_EVERY_MS);
}

pollStatus();
pollMetrics();
