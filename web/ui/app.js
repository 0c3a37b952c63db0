// redrive web UI: a read-only view of the JSON API. Vanilla JS, no build
// step. Every value from the API is inserted as text, never as HTML.
"use strict";

const main = document.getElementById("main");

// el builds an element: el("td", {class: "num"}, "text", childNode, ...).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const pill = (s) => el("span", { class: "pill s-" + s }, s);
const link = (href, text) => el("a", { href }, text);
const time = (t) => (t && !t.startsWith("0001-") ? new Date(t).toLocaleString() : "");
const secs = (ns) => (ns / 1e9).toFixed(ns < 1e9 ? 3 : 1) + " s";

async function api(path) {
  const res = await fetch("/api/v1" + path, { headers: { Accept: "application/json" } });
  const body = await res.json().catch(() => ({ error: res.statusText }));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function table(head, rows) {
  return el("table", {},
    el("thead", {}, el("tr", {}, head.map((h) => el("th", { class: h.startsWith("#") ? "num" : null }, h.replace(/^#/, ""))))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: head.length, class: "muted" }, "none"))));
}

function pager(next, route) {
  if (!next) return null;
  return el("p", {}, link(route + (route.includes("?") ? "&" : "?") + "cursor=" + encodeURIComponent(next), "Next page →"));
}

function decode(b64) {
  if (!b64) return "";
  try {
    return new TextDecoder().decode(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)));
  } catch (e) {
    return b64;
  }
}

async function viewRuns(params) {
  const q = new URLSearchParams({ limit: "50" });
  if (params.get("cursor")) q.set("cursor", params.get("cursor"));
  const page = await api("/runs?" + q);
  const rows = page.data.map((r) => el("tr", {},
    el("td", {}, link("#/runs/" + r.id, "#" + r.id)),
    el("td", {}, r.pipeline), el("td", {}, r.name || ""), el("td", {}, pill(r.status)),
    el("td", { class: "num" }, r.counts.total), el("td", { class: "num" }, r.counts.succeeded),
    el("td", { class: "num" }, r.counts.dead), el("td", { class: "num" }, r.counts.pending + r.counts.running),
    el("td", {}, time(r.created_at))));
  return [el("h1", {}, "Runs"),
    table(["Run", "Pipeline", "Name", "Status", "#Total", "#Succeeded", "#Dead", "#In flight", "Created"], rows),
    pager(page.next_cursor, "#/")];
}

function itemRows(items) {
  return items.map((it) => el("tr", {},
    el("td", {}, link("#/items/" + it.id, "#" + it.id)), el("td", {}, it.key || ""),
    el("td", {}, it.stage), el("td", {}, pill(it.state)),
    el("td", {}, it.reason ? it.reason.class : ""), el("td", {}, it.reason ? it.reason.error : ""),
    el("td", { class: "num" }, it.reason ? it.reason.attempts : it.attempt),
    el("td", {}, time(it.reason ? it.reason.at : it.updated_at))));
}
const itemHead = ["Item", "Key", "Stage", "State", "Class", "Error", "#Attempts", "At"];

async function viewRun(id, params) {
  const d = await api("/runs/" + encodeURIComponent(id));
  const r = d.run;
  const c = r.counts;
  const q = new URLSearchParams({ run: id, limit: "50" });
  if (params.get("cursor")) q.set("cursor", params.get("cursor"));
  const dlq = await api("/dlq?" + q);
  const card = (label, v) => el("div", { class: "card" }, el("b", {}, v), label);
  return [
    el("h1", {}, "Run #" + r.id + " · " + r.pipeline + (r.name ? " · " + r.name : "") + " ", pill(r.status)),
    r.reason ? el("p", { class: "error" }, r.reason) : null,
    el("div", { class: "cards" }, card("total", c.total), card("succeeded", c.succeeded), card("dead", c.dead),
      card("canceled", c.canceled), card("pending", c.pending), card("running", c.running),
      card("success rate", (d.success_rate * 100).toFixed(1) + " %")),
    el("h2", {}, "Items by stage"),
    table(["Pipeline", "Stage", "State", "#Items"], d.stages.map((s) => el("tr", {},
      el("td", {}, s.pipeline), el("td", {}, s.stage), el("td", {}, pill(s.state)), el("td", { class: "num" }, s.count)))),
    el("h2", {}, "Retries needed"),
    table(["#Retries", "#Items"], d.retry_histogram.map((b) => el("tr", {},
      el("td", { class: "num" }, b.retries), el("td", { class: "num" }, b.items)))),
    el("h2", {}, "Top errors"),
    table(["Stage", "Class", "Error", "#Count"], d.top_errors.map((e) => el("tr", {},
      el("td", {}, e.stage), el("td", {}, e.class), el("td", {}, e.error), el("td", { class: "num" }, e.count)))),
    el("h2", {}, "Dead letters"),
    table(itemHead, itemRows(dlq.data)),
    pager(dlq.next_cursor, "#/runs/" + id),
  ];
}

async function viewDLQ(params) {
  const q = new URLSearchParams({ limit: "50" });
  for (const k of ["pipeline", "stage", "class", "error_contains", "cursor"]) {
    if (params.get(k)) q.set(k, params.get(k));
  }
  const page = await api("/dlq?" + q);
  const form = el("form", { class: "filters" },
    ["pipeline", "stage", "class", "error_contains"].map((k) =>
      el("input", { name: k, placeholder: k.replace("_", " "), value: params.get(k) || "" })),
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) f.set(k, v);
    location.hash = "#/dlq?" + f;
  });
  const base = new URLSearchParams(q);
  base.delete("cursor");
  base.delete("limit");
  return [el("h1", {}, "Dead letters"), form, table(itemHead, itemRows(page.data)), pager(page.next_cursor, "#/dlq?" + base)];
}

async function viewItem(id) {
  const d = await api("/items/" + encodeURIComponent(id));
  const it = d.item;
  const attempts = d.attempts.map((a) => el("li", {},
    el("div", {}, el("b", {}, a.stage + " #" + a.number), " ", pill(a.outcome), a.class ? " " + a.class : ""),
    el("div", { class: "muted" }, time(a.started_at) + " · took " +
      ((new Date(a.finished_at) - new Date(a.started_at)) / 1000).toFixed(3) + " s" +
      (a.delay ? " · next attempt after " + secs(a.delay) : "") +
      (a.config_hash ? " · config " + a.config_hash : "")),
    a.error ? el("div", { class: "error" }, a.error) : null));
  return [
    el("h1", {}, "Item #" + it.id + " ", pill(it.state)),
    el("p", {}, "Run ", link("#/runs/" + it.run_id, "#" + it.run_id), " · pipeline " + it.pipeline +
      " · stage " + it.stage + (it.key ? " · key " + it.key : "") + " · enqueued " + time(it.enqueued_at)),
    it.reason ? el("p", { class: "error" }, "Reason: " + it.reason.class + " at stage " + it.reason.stage +
      " after " + it.reason.attempts + (it.reason.attempts === 1 ? " attempt: " : " attempts: ") + it.reason.error) : null,
    el("h2", {}, "Attempts"),
    d.attempts.length ? el("ol", { class: "timeline" }, attempts) : el("p", { class: "muted" },
      it.state === "pending" || it.state === "running" ? "No attempts yet." : "No attempts: it never ran."),
    el("h2", {}, "Input"), el("pre", {}, decode(it.input)),
    el("h2", {}, it.state === "succeeded" ? "Output" : "Current payload"), el("pre", {}, decode(it.payload)),
  ];
}

async function route() {
  const [path, qs] = (location.hash.slice(1) || "/").split("?");
  const params = new URLSearchParams(qs || "");
  let m;
  try {
    let view;
    if ((m = path.match(/^\/runs\/(\d+)$/))) view = await viewRun(m[1], params);
    else if ((m = path.match(/^\/items\/(\d+)$/))) view = await viewItem(m[1]);
    else if (path === "/dlq") view = await viewDLQ(params);
    else view = await viewRuns(params);
    main.replaceChildren(...view.filter(Boolean));
  } catch (e) {
    main.replaceChildren(el("p", { class: "error" }, "Error: " + e.message));
  }
}

window.addEventListener("hashchange", route);
route();
