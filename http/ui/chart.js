// A small SVG line chart for the console's live charts (issue #20): time on x, one polyline a
// series, the y range from 0 to the largest value, a legend. No dependencies.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const MAX_SERIES = 12;
const PALETTE = ["#2457c5", "#d9480f", "#2b8a3e", "#9c36b5", "#e67700", "#0b7285", "#c2255c",
  "#5c940d"];

function svg(name, attrs) {
  const e = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// A short form of `v` with its unit: 1.2k, 3.4M.
function shortNumber(v, unit) {
  const a = Math.abs(v);
  const [d, s] = a >= 1e9 ? [1e9, "G"] : a >= 1e6 ? [1e6, "M"] : a >= 1e3 ? [1e3, "k"] : [1, ""];
  const n = v / d;
  return (Number.isInteger(n) ? n : n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0)) + s + (unit ? " " + unit : "");
}

// Draws `series` ([{name, points: [[t_ms, value|null], ...]}]) into a new element:
// <div class="chart" data-chart=id data-points=N> with a title, an SVG and a legend.
// Points with a null value are gaps.
function lineChart(id, title, unit, allSeries) {
  // At most MAX_SERIES lines: the largest by their newest value.
  const newest = s => { const p = s.points.filter(q => q[1] !== null).pop(); return p ? p[1] : 0; };
  const series = allSeries.length <= MAX_SERIES ? allSeries
    : [...allSeries].sort((a, b) => newest(b) - newest(a)).slice(0, MAX_SERIES);
  const box = document.createElement("div");
  box.className = "chart";
  box.dataset.chart = id;
  const h = document.createElement("h3");
  h.textContent = title;
  box.append(h);
  const W = 600, H = 180, L = 54, R = 8, T = 8, B = 20;
  const plot = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title });
  const all = series.flatMap(s => s.points.filter(p => p[1] !== null));
  box.dataset.points = String(all.length);
  if (all.length === 0) {
    const t = svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" });
    t.textContent = "no data yet";
    plot.append(t);
    box.append(plot);
    return box;
  }
  // Loops, not Math.min(...all): a spread of many points overflows the call stack.
  let t0 = Infinity, t1 = -Infinity, top = 0;
  for (const [t, v] of all) {
    if (t < t0) t0 = t;
    if (t > t1) t1 = t;
    if (v > top) top = v;
  }
  top = top || 1;
  const x = t => L + (t1 === t0 ? 0 : (t - t0) / (t1 - t0)) * (W - L - R);
  const y = v => T + (1 - v / top) * (H - T - B);
  plot.append(svg("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), stroke: "#ccd" }));
  plot.append(svg("line", { x1: L, y1: y(top), x2: W - R, y2: y(top), stroke: "#eef",
    "stroke-dasharray": "3 3" }));
  for (const [v, yy] of [[0, y(0)], [top, y(top) + 8]]) {
    const t = svg("text", { x: L - 4, y: yy, "text-anchor": "end" });
    t.textContent = shortNumber(v, unit);
    plot.append(t);
  }
  const span = svg("text", { x: W - R, y: H - 4, "text-anchor": "end" });
  span.textContent = `last ${Math.round((t1 - t0) / 1000)} s`;
  plot.append(span);
  const legend = document.createElement("div");
  legend.className = "legend";
  series.forEach((s, i) => {
    const color = PALETTE[i % PALETTE.length];
    let d = "", pen = false;
    for (const [t, v] of s.points) {
      if (v === null) { pen = false; continue; }
      d += `${pen ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    }
    if (d) plot.append(svg("path", { d, fill: "none", stroke: color, "stroke-width": 1.6 }));
    const last = s.points.filter(p => p[1] !== null).pop();
    const item = document.createElement("span");
    item.style.setProperty("--c", color);
    item.textContent = `${s.name}${last ? ": " + shortNumber(last[1], unit) : ""}`;
    legend.append(item);
  });
  if (allSeries.length > series.length) {
    legend.append(document.createTextNode(`(the ${series.length} largest of ${allSeries.length})`));
  }
  box.append(plot, legend);
  return box;
}
