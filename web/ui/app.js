// redrive web UI: the operators' console over the JSON API. Vanilla JS, no
// build step. Every value from the API is inserted as text, never as HTML.
// The write token is asked for once and kept only in sessionStorage.
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

// Pages go both ways with a stack of cursors in the URL: "back" lists the
// cursors of the pages before this one ("-" is the first page), so that
// "Previous page" is a plain link that works after a reload or when shared.
// Cursors are base64url and never contain a comma.
function pager(next, route, params) {
  const base = new URLSearchParams(params);
  const cursor = base.get("cursor");
  const back = base.get("back") ? base.get("back").split(",") : [];
  base.delete("cursor");
  base.delete("back");
  const href = (c, stack) => {
    const q = new URLSearchParams(base);
    if (c && c !== "-") q.set("cursor", c);
    if (stack.length) q.set("back", stack.join(","));
    const qs = q.toString();
    return route + (qs ? (route.includes("?") ? "&" : "?") + qs : "");
  };
  const prev = cursor ? el("a", { id: "prev-page", href: href(back[back.length - 1] || "-", back.slice(0, -1)) }, "← Previous page") : null;
  const nextLink = next ? el("a", { id: "next-page", href: href(next, [...back, cursor || "-"]) }, "Next page →") : null;
  if (!prev && !nextLink) return null;
  return el("p", { class: "pager" }, prev, prev && nextLink ? " · " : null, nextLink);
}

// decode shows an item's bytes: a JSON value as JSON, base64 as its text.
function decode(value, encoding) {
  if (value === undefined || value === null) return "";
  if (encoding === "json") return JSON.stringify(value, null, 2);
  try {
    return new TextDecoder().decode(Uint8Array.from(atob(value), (c) => c.charCodeAt(0)));
  } catch (e) {
    return String(value);
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
    pager(page.next_cursor, "#/", params)];
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
    el("h2", {}, "Attempts over time"), await timelineSection({ run: id }),
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
    pager(dlq.next_cursor, "#/runs/" + id, params),
  ];
}

// dlqFilters are the filter fields of the items view, as URL keys.
const dlqFilters = ["run", "pipeline", "stage", "key", "state", "class", "error_contains", "fingerprint", "since", "until"];

// stateChoices are the states the items view filters on; the first three
// are the dead-letter queue's, with their errors grouped by cause.
const stateChoices = ["dead", "canceled", "dead,canceled", "pending", "running", "succeeded"];

// filterOf copies the filter fields present in params.
function filterOf(params) {
  const f = {};
  for (const k of dlqFilters) if (params.get(k)) f[k] = params.get(k);
  return f;
}

async function viewDLQ(params) {
  const f = filterOf(params);
  const state = params.get("state") || "dead";
  const dlq = stateChoices.slice(0, 3).includes(state);
  const fq = new URLSearchParams(f);
  const st = new URLSearchParams(fq);
  st.set("state", state);
  const q = new URLSearchParams(dlq ? fq : st);
  q.set("limit", "50");
  if (params.get("cursor")) q.set("cursor", params.get("cursor"));
  const [page, total, groups] = await Promise.all([api((dlq ? "/dlq?" : "/items?") + q), api("/count?" + st),
    dlq ? api("/errors?" + fq) : Promise.resolve(null)]);
  const input = (k, label, type) => el("label", {}, label + " ",
    el("input", { name: k, type: type || "text", value: params.get(k) || "", size: k === "error_contains" || k === "fingerprint" ? 24 : 10 }));
  const stateSel = el("select", { name: "state", id: "filter-state" },
    stateChoices.map((v) => {
      const o = el("option", { value: v }, v.replace(",", " and "));
      if (state === v) o.selected = true;
      return o;
    }));
  const form = el("form", { class: "filters", "aria-label": "Filter items" },
    input("run", "Run"), input("pipeline", "Pipeline"), input("stage", "Stage"), input("key", "Key"),
    el("label", {}, "State ", stateSel), input("class", "Class"), input("error_contains", "Error text"), input("fingerprint", "Cause"),
    input("since", "Since (RFC 3339)"), input("until", "Until"),
    el("button", { type: "submit" }, "Filter"), link("#/dlq", "Clear"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const nf = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v && !(k === "state" && v === "dead")) nf.set(k, v.trim());
    location.hash = "#/dlq?" + nf;
  });
  const groupRows = (groups ? groups.data : []).map((g) => {
    const to = new URLSearchParams(fq);
    to.set("pipeline", g.pipeline);
    to.set("stage", g.stage);
    to.set("class", g.class);
    to.set("fingerprint", g.fingerprint);
    return el("tr", {},
      el("td", {}, g.stage), el("td", {}, g.class),
      el("td", {}, el("code", {}, g.fingerprint), g.messages > 1 ? el("div", { class: "muted" }, "e.g. " + g.examples[0]) : null),
      el("td", { class: "num" }, g.dead), el("td", { class: "num" }, g.failures), el("td", { class: "num" }, g.messages),
      el("td", {}, g.dead ? link("#/dlq?" + to, "Show dead items") : ""));
  });
  return [el("h1", {}, dlq ? "Dead letters" : "Items: " + state), form,
    el("p", { class: "total", id: "dlq-total" }, total.total + (total.total === 1 ? " item matches" : " items match") +
      " the filter · showing " + page.data.length + " on this page"),
    actionBar(f, total.total, state),
    groups ? el("h2", {}, "Errors by cause") : null,
    groups ? table(["Stage", "Class", "Cause", "#Dead", "#Failed attempts", "#Messages", ""], groupRows) : null,
    el("h2", {}, "Items"),
    table(itemHead, itemRows(page.data)), pager(page.next_cursor, "#/dlq", params)];
}

// auditTarget links an audit entry to what it selected: the item of an
// action on one item, else the items view of its filter.
function auditTarget(filter) {
  if (!filter) return "every item";
  const f = new URLSearchParams(filter);
  const ids = (f.get("ids") || "").split(",").filter(Boolean);
  if (ids.length === 1 && [...f.keys()].every((k) => k === "ids" || k === "state")) return link("#/items/" + ids[0], "item #" + ids[0]);
  return link("#/dlq?" + filter, filter);
}

async function viewAudit(params) {
  const q = new URLSearchParams({ limit: "50" });
  if (params.get("cursor")) q.set("cursor", params.get("cursor"));
  const page = await api("/audit?" + q);
  const rows = page.data.map((a) => el("tr", {},
    el("td", {}, time(a.at)), el("td", {}, a.actor), el("td", {}, pill(a.kind)),
    el("td", {}, auditTarget(a.filter)),
    el("td", { class: "num" }, a.count), el("td", {}, a.detail || "")));
  return [el("h1", {}, "Audit log"),
    el("p", { class: "muted" }, "Every action operators took on items, newest first."),
    table(["At", "Who", "Action", "Filter", "#Items", "How"], rows),
    pager(page.next_cursor, "#/audit", params)];
}

// marked says what an audit action did to an item, for its timeline.
const marked = { redrive: "Redriven", cancel: "Canceled", retry_now: "Retried now", purge: "Purged" };

async function viewItem(id) {
  const d = await api("/items/" + encodeURIComponent(id));
  const it = d.item;
  const attempts = d.attempts.map((a) => [a.started_at, el("li", {},
    el("div", {}, el("b", {}, a.stage + " #" + a.number), " ", pill(a.outcome), a.class ? " " + a.class : ""),
    el("div", { class: "muted" }, time(a.started_at) + " · took " +
      ((new Date(a.finished_at) - new Date(a.started_at)) / 1000).toFixed(3) + " s" +
      (a.delay ? " · next attempt after " + secs(a.delay) : "") +
      (a.config_hash ? " · config " + a.config_hash : "")),
    a.error ? el("div", { class: "error" }, a.error) : null)]);
  const marks = (d.actions || []).map((a) => [a.at, el("li", { class: "mark" },
    el("div", {}, el("b", {}, (marked[a.kind] || a.kind) + " by " + a.actor + " at " + time(a.at))),
    el("div", { class: "muted" }, (a.detail ? a.detail + " · " : "") + (a.count > 1 ? "one of " + a.count + " items · " : ""),
      link("#/audit", "audit log")))]);
  const timeline = [...attempts, ...marks].sort((x, y) => new Date(x[0]) - new Date(y[0])).map((x) => x[1]);
  return [
    el("h1", {}, "Item #" + it.id + " ", pill(it.state)),
    el("p", {}, "Run ", link("#/runs/" + it.run_id, "#" + it.run_id), " · pipeline " + it.pipeline +
      " · stage " + it.stage + (it.key ? " · key " + it.key : "") + " · enqueued " + time(it.enqueued_at) +
      (it.state === "pending" ? " · due " + time(it.next_at) : "")),
    it.reason ? el("p", { class: "error" }, "Reason: " + it.reason.class + " at stage " + it.reason.stage +
      " after " + it.reason.attempts + (it.reason.attempts === 1 ? " attempt: " : " attempts: ") + it.reason.error) : null,
    itemActionBar(it, d.attempts),
    el("h2", {}, "Attempts and actions"),
    timeline.length ? el("ol", { class: "timeline", id: "timeline" }, timeline) : el("p", { class: "muted" },
      it.state === "pending" || it.state === "running" ? "No attempts yet." : "No attempts: it never ran."),
    el("h2", {}, "Input"), el("pre", {}, decode(it.input, it.input_encoding)),
    el("h2", {}, it.state === "succeeded" ? "Output" : "Current payload"), el("pre", {}, decode(it.payload, it.payload_encoding)),
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
    else if (path === "/audit") view = await viewAudit(params);
    else if (path === "/workers") view = await viewWorkers();
    else if (path === "/stages") view = await viewStages(params);
    else view = await viewRuns(params);
    main.replaceChildren(...view.filter(Boolean));
  } catch (e) {
    main.replaceChildren(el("p", { class: "error" }, "Error: " + e.message));
  }
}

window.addEventListener("hashchange", route);
route();

// Live refresh: the view reloads every 5 s, except while the operator is
// confirming an action, typing in a field or selecting text.
setInterval(() => {
  if (window.redriveBusy || document.hidden || document.querySelector("dialog[open]")) return;
  const a = document.activeElement;
  if (a && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName)) return;
  if (String(window.getSelection ? window.getSelection() : "")) return;
  route();
}, 5000);
