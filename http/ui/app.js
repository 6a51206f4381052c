// The console's core (issue #20): talks to this node's admin API only, samples /metrics every
// 2 s while the page is open, routes between the views of views.js by the URL's hash.
"use strict";

const SAMPLE_MS = 2000;
const KEEP_SAMPLES = 90; // 3 minutes of history
const TOKEN_KEY = "zper-admin-token";

const consoleState = {
  samples: [], // [{t: ms, metrics: [{name, labels, value}]}]
  view: "cluster",
  refreshing: false,
  again: false,
};

// GET or send JSON to the admin API; resolves to the parsed body, rejects with an Error whose
// message is the API's `message` (or the HTTP status).
async function api(path, method = "GET", body = undefined) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (method !== "GET" && token) headers.Authorization = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  const text = await r.text();
  let parsed = null;
  try { parsed = text ? JSON.parse(text) : null; } catch (_) { parsed = null; }
  if (!r.ok) {
    const why = parsed && parsed.message ? parsed.message : `${r.status} ${r.statusText}`;
    const err = new Error(`${method} ${path}: ${why}`);
    err.status = r.status;
    throw err;
  }
  return parsed;
}

// Prometheus text exposition -> [{name, labels: {k: v}, value}].
function parseMetrics(text) {
  const out = [];
  const line = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
  const label = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  for (const l of text.split("\n")) {
    if (!l || l[0] === "#") continue;
    const m = line.exec(l);
    if (!m) continue;
    const labels = {};
    for (const [, k, v] of (m[2] || "").matchAll(label)) {
      labels[k] = v.replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

// Sum of the samples of metric `name` grouped by `key(labels)` (one group when key is null).
function sumBy(metrics, name, key) {
  const groups = new Map();
  for (const m of metrics) {
    if (m.name !== name) continue;
    const k = key ? key(m.labels) : "";
    groups.set(k, (groups.get(k) || 0) + m.value);
  }
  return groups;
}

async function sample() {
  try {
    const r = await fetch("/metrics", { cache: "no-store" });
    if (!r.ok) throw new Error(`/metrics: ${r.status}`);
    consoleState.samples.push({ t: Date.now(), metrics: parseMetrics(await r.text()) });
    if (consoleState.samples.length > KEEP_SAMPLES) consoleState.samples.shift();
    const m = document.getElementById("message");
    if (m.dataset.source === "metrics") showMessage("", "");
    if (consoleState.view === "charts") render();
  } catch (e) {
    showMessage("error", "Cannot read this node's metrics: " + e.message);
    document.getElementById("message").dataset.source = "metrics";
  }
}

// Per-second rates of counter `name` between consecutive samples, one series per key.
function rateSeries(name, key) {
  const s = consoleState.samples, series = new Map();
  for (let i = 1; i < s.length; i++) {
    const dt = (s[i].t - s[i - 1].t) / 1000;
    const before = sumBy(s[i - 1].metrics, name, key), now = sumBy(s[i].metrics, name, key);
    for (const [k, v] of now) {
      const prev = before.get(k);
      const rate = prev === undefined || v < prev || dt <= 0 ? null : (v - prev) / dt;
      if (!series.has(k)) series.set(k, []);
      series.get(k).push([s[i].t, rate]);
    }
  }
  return [...series].map(([k, points]) => ({ name: k || name, points }));
}

// Mean of histogram `name` per interval (delta sum / delta count), times `scale`.
function meanSeries(name, label, scale) {
  const s = consoleState.samples, points = [];
  for (let i = 1; i < s.length; i++) {
    const sum = n => sumBy(s[n].metrics, name + "_sum", null).get("") || 0;
    const count = n => sumBy(s[n].metrics, name + "_count", null).get("") || 0;
    const dc = count(i) - count(i - 1);
    points.push([s[i].t, dc > 0 ? ((sum(i) - sum(i - 1)) / dc) * scale : null]);
  }
  return [{ name: label, points }];
}

// Gauge `name` over the samples, one series per key.
function gaugeSeries(name, key) {
  const series = new Map();
  for (const smp of consoleState.samples) {
    for (const [k, v] of sumBy(smp.metrics, name, key)) {
      if (!series.has(k)) series.set(k, []);
      series.get(k).push([smp.t, v]);
    }
  }
  return [...series].map(([k, points]) => ({ name: k, points }));
}

// The newest value of gauge `name` whose labels match `want`, or undefined. The newest sample
// is indexed by metric name once, not searched whole for every table row.
function latestGauge(name, want) {
  const last = consoleState.samples[consoleState.samples.length - 1];
  if (!last) return undefined;
  if (!last.byName) {
    last.byName = new Map();
    for (const x of last.metrics) {
      if (!last.byName.has(x.name)) last.byName.set(x.name, []);
      last.byName.get(x.name).push(x);
    }
  }
  const m = (last.byName.get(name) || []).find(x =>
    Object.entries(want).every(([k, v]) => x.labels[k] === String(v)));
  return m ? m.value : undefined;
}

function showMessage(kind, text) {
  const m = document.getElementById("message");
  delete m.dataset.source;
  m.className = kind;
  m.textContent = text;
  m.hidden = !text;
}

// Runs a mutating admin call, reports its outcome and refreshes the view.
async function act(what, method, path, body) {
  try {
    await api(path, method, body);
    showMessage("ok", what + ": done");
  } catch (e) {
    showMessage("error", what + " failed: " + e.message +
      (e.status === 401 ? " (check the admin token: Admin actions, then enter it again)" : ""));
  }
  render();
}

async function render() {
  // One render at a time; a request that comes meanwhile (a new view) runs right after.
  if (consoleState.refreshing) { consoleState.again = true; return; }
  consoleState.refreshing = true;
  consoleState.again = false;
  const view = consoleState.view;
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.view === view);
  }
  try {
    const el = await VIEWS[view]();
    const main = document.getElementById("view");
    main.replaceChildren(el);
    main.dataset.view = view;
    document.getElementById("footer").textContent =
      `Updated ${new Date().toLocaleTimeString()} · ${consoleState.samples.length} metric samples`;
  } catch (e) {
    showMessage("error", e.message);
  } finally {
    consoleState.refreshing = false;
    if (consoleState.again) render();
  }
}

function route() {
  const want = location.hash.replace("#", "") || "cluster";
  consoleState.view = Object.hasOwn(VIEWS, want) ? want : "cluster";
  render();
}

function setUpAdmin() {
  const form = document.getElementById("admin-form");
  const toggle = document.getElementById("admin-toggle");
  const enabled = () => sessionStorage.getItem(TOKEN_KEY) !== null;
  const apply = () => {
    document.body.classList.toggle("admin", enabled());
    toggle.textContent = enabled() ? "Admin actions on (turn off)" : "Admin actions…";
  };
  toggle.addEventListener("click", () => {
    if (enabled()) {
      sessionStorage.removeItem(TOKEN_KEY);
      apply();
    } else {
      form.hidden = false;
      document.getElementById("admin-token").focus();
    }
  });
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, document.getElementById("admin-token").value);
    document.getElementById("admin-token").value = "";
    form.hidden = true;
    apply();
  });
  document.getElementById("admin-cancel").addEventListener("click", () => { form.hidden = true; });
  apply();
}

window.addEventListener("hashchange", route);
setUpAdmin();
route();
sample();
setInterval(sample, SAMPLE_MS);
// Tables refresh less often than the charts (which redraw on every sample).
setInterval(() => { if (consoleState.view !== "charts") render(); }, 3 * SAMPLE_MS);
