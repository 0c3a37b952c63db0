// Charts of the operators' console: attempts per stage over time, drawn as
// inline SVG from GET /api/v1/timeline. One small chart per stage; each
// bucket is a bar stacked by outcome, so its height is the attempts made.
// Every chart has a title and a description, and a table of the same
// numbers for screen readers and for copying. Loaded before app.js, which
// provides el and api.
"use strict";

const svgNS = "http://www.w3.org/2000/svg";

// The series of a bar, bottom up. Colours keep at least 3:1 contrast
// against the white chart background; the table carries the exact values.
const chartSeries = [
  { key: "succeeded", label: "succeeded", color: "#1f8a4c" },
  { key: "retried", label: "retried", color: "#b26a00" },
  { key: "waits", label: "rate-limited or lost", color: "#5b6478" },
  { key: "dead", label: "dead", color: "#c23b30" },
];

function svg(tag, attrs, ...children) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

// shortTime labels a bucket start: the time of day, and the date when the
// range spans days.
function shortTime(d, days) {
  const t = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: days ? undefined : "2-digit" });
  return days ? d.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + t : t;
}

// stageChart draws one stage, the nth chart of the view: buckets is the
// full list of bucket counts (zeros included), tl the API response. Its
// IDs depend on n only, so that a refresh with the same numbers draws an
// equal chart, which the page keeps.
function stageChart(key, buckets, tl, n) {
  const W = 640, H = 150, L = 40, R = 8, T = 10, B = 26;
  const nb = tl.buckets, bw = (W - L - R) / nb;
  const max = Math.max(1, ...buckets.map((b) => b.attempts));
  const y = (v) => T + (H - T - B) * (1 - v / max);
  const id = "chart-" + n;
  const total = buckets.reduce((a, b) => a + b.attempts, 0);
  const sum = (k) => buckets.reduce((a, b) => a + b[k], 0);
  const title = "Attempts at stage " + key.stage + " of " + key.pipeline;
  const desc = total + " attempts in " + nb + " buckets of " + tl.step + " s from " + new Date(tl.since).toLocaleString() +
    ": " + sum("succeeded") + " succeeded, " + sum("retried") + " retried, " + sum("waits") + " rate-limited or lost, " +
    sum("dead") + " dead; at most " + max + " in one bucket.";
  const g = svg("g", { class: "bars" });
  buckets.forEach((b, i) => {
    if (!b.attempts) return;
    const bar = svg("g", { class: "bar", "data-bucket": i });
    let acc = 0;
    for (const s of chartSeries) {
      if (!b[s.key]) continue;
      const y0 = y(acc), y1 = y(acc + b[s.key]);
      acc += b[s.key];
      bar.append(svg("rect", { class: "seg seg-" + s.key, x: (L + i * bw + bw * 0.1).toFixed(2), y: y1.toFixed(2),
        width: Math.max(bw * 0.8, 1).toFixed(2), height: Math.max(y0 - y1, 0.5).toFixed(2), fill: s.color },
      svg("title", {}, b.label + ": " + b[s.key] + " " + s.label)));
    }
    g.append(bar);
  });
  const days = new Date(tl.until) - new Date(tl.since) > 864e5;
  const axis = svg("g", { class: "axis", fill: "#4a5263", "font-size": "11" },
    svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#4a5263" }),
    svg("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#4a5263" }),
    svg("text", { x: L - 4, y: T + 4, "text-anchor": "end" }, max),
    svg("text", { x: L - 4, y: H - B, "text-anchor": "end" }, 0),
    svg("text", { x: L, y: H - 8 }, shortTime(new Date(tl.since), days)),
    svg("text", { x: W - R, y: H - 8, "text-anchor": "end" }, shortTime(new Date(tl.until), days)));
  const chart = svg("svg", { class: "chart", viewBox: "0 0 " + W + " " + H, role: "img", "aria-labelledby": id + "-t " + id + "-d",
    "data-pipeline": key.pipeline, "data-stage": key.stage },
  svg("title", { id: id + "-t" }, title), svg("desc", { id: id + "-d" }, desc), axis, g);
  const rows = buckets.filter((b) => b.attempts).map((b) => el("tr", {}, el("td", {}, b.label),
    el("td", { class: "num" }, b.attempts), ...chartSeries.map((s) => el("td", { class: "num" }, b[s.key]))));
  return el("figure", { class: "stage-chart", "data-key": "chart " + key.pipeline + "/" + key.stage },
    el("figcaption", {}, el("b", {}, key.pipeline + " / " + key.stage), " · " + total + (total === 1 ? " attempt" : " attempts")),
    chart,
    el("details", {}, el("summary", {}, "Table of " + title.toLowerCase()),
      table(["Bucket", "#Attempts", ...chartSeries.map((s) => "#" + s.label)], rows)));
}

// timelineSection fetches the timeline for query q (run, pipeline, since,
// step...) and draws one chart per stage, with a legend.
async function timelineSection(q) {
  const tl = await api("/timeline?" + new URLSearchParams(q));
  const byStage = new Map();
  for (const b of tl.data) {
    const k = b.pipeline + "\u0000" + b.stage;
    if (!byStage.has(k)) byStage.set(k, { key: { pipeline: b.pipeline, stage: b.stage }, rows: [] });
    byStage.get(k).rows.push(b);
  }
  const start = new Date(tl.since).getTime();
  const days = new Date(tl.until) - new Date(tl.since) > 864e5;
  const charts = [...byStage.values()].map(({ key, rows }, n) => {
    const buckets = Array.from({ length: tl.buckets }, (_, i) => ({
      label: shortTime(new Date(start + i * tl.step * 1000), days), attempts: 0, succeeded: 0, retried: 0, waits: 0, dead: 0 }));
    for (const r of rows) {
      Object.assign(buckets[r.bucket], { attempts: r.attempts, succeeded: r.succeeded, retried: r.retried,
        waits: r.rate_limited + r.lost, dead: r.dead });
    }
    return stageChart(key, buckets, tl, n);
  });
  const legend = el("ul", { class: "legend", "aria-label": "Legend" },
    chartSeries.map((s) => el("li", {}, el("span", { class: "swatch sw-" + s.key }), s.label)));
  return el("section", { class: "timeline-charts", "aria-label": "Attempts over time" },
    el("p", { class: "muted" }, "Attempts per " + (tl.step >= 60 ? tl.step / 60 + " min" : tl.step + " s") + " from " +
      new Date(tl.since).toLocaleString() + " to " + new Date(tl.until).toLocaleString() + ", stacked by outcome."),
    charts.length ? legend : null,
    charts.length ? el("div", { class: "charts" }, charts) : el("p", { class: "muted", id: "no-attempts" }, "No attempts in this time range."));
}
