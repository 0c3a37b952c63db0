// redrive web UI: the operators' console over the JSON API. Vanilla JS, no
// build step. Every value from the API is inserted as text, never as HTML.
// Tokens are asked for only when the server needs one (auth.js).
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

// ApiError is a refusal of the API: its message, and the parameter at
// fault when the API named one.
class ApiError extends Error {
  constructor(message, field, status) {
    super(message);
    this.field = field || "";
    this.status = status;
  }
}

// api reads path, with the kept token that grants the read scope, if any.
// A refusal for want of a token throws AuthError (the view then asks for
// one); other errors throw ApiError.
async function api(path) {
  const t = tokenFor("read");
  const headers = { Accept: "application/json" };
  if (t) headers.Authorization = "Bearer " + t.secret;
  const res = await fetch("/api/v1" + path, { headers });
  const body = await res.json().catch(() => ({ error: res.statusText }));
  if (res.status === 401 || res.status === 403) {
    if (res.status === 401 && t) forgetToken(t.secret);
    throw new AuthError(body.error || res.statusText, "read", res.status === 401 && t ? t.name : "");
  }
  if (!res.ok) throw new ApiError(body.error || res.statusText, body.field, res.status);
  return body;
}

function table(head, rows, id) {
  return el("table", { id },
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
const dlqFilters = ["run", "pipeline", "stage", "key", "state", "class", "error_contains", "fingerprint", "action", "since", "until"];

// fieldLabels name the filter fields as the form labels them.
const fieldLabels = { run: "Run", pipeline: "Pipeline", stage: "Stage", key: "Key", state: "State", class: "Class",
  error_contains: "Error text", fingerprint: "Cause", action: "Audit entry", since: "Since", until: "Until" };

// stateChoices are the states the items view filters on; the first three
// are the dead-letter queue's, with their errors grouped by cause; "all" is
// every state (the items an audit entry changed, wherever they are now).
const stateChoices = ["dead", "canceled", "dead,canceled", "pending", "running", "succeeded", "all"];
const dlqStates = stateChoices.slice(0, 3);

// filterOf copies the filter fields present in params.
function filterOf(params) {
  const f = {};
  for (const k of dlqFilters) if (params.get(k)) f[k] = params.get(k);
  return f;
}

// describeFilter says in words which items the filter f selects, as the
// command line's confirmation does: "dead items · stage fetch · class final".
function describeFilter(f) {
  const st = f.state || "";
  const parts = [st === "all" || st === "" ? "items in any state" : st.split(",").join(" and ") + " items"];
  const add = (name, v) => v && parts.push(name + " " + v);
  add("run", f.run);
  add("pipeline", f.pipeline);
  add("stage", f.stage);
  add("key", f.key);
  add("class", f.class);
  add("error containing", f.error_contains && "“" + f.error_contains + "”");
  add("cause", f.fingerprint && "“" + f.fingerprint + "”");
  add("changed by audit entry", f.action && "#" + f.action);
  add("since", f.since && time(f.since));
  add("until", f.until && time(f.until));
  if (f.ids) parts.push((f.ids.includes(",") ? "items #" : "item #") + f.ids.split(",").join(", #"));
  add("at most", f.limit);
  return parts.join(" · ");
}

// filterForm is the items view's filter, from the URL; invalid names the
// field the server refused, marked for assistive technology.
function filterForm(params, state, defaultState, invalid) {
  const input = (k, label, type) => el("label", {}, label + " ",
    el("input", { name: k, id: "filter-" + k, type: type || "text", value: params.get(k) || "",
      size: k === "error_contains" || k === "fingerprint" ? 24 : k === "action" ? 5 : 10,
      "aria-invalid": invalid === k ? "true" : null, "aria-describedby": invalid === k ? "filter-error" : null }));
  const stateSel = el("select", { name: "state", id: "filter-state", "aria-invalid": invalid === "state" ? "true" : null },
    stateChoices.map((v) => {
      const o = el("option", { value: v }, v === "all" ? "any state" : v.replace(",", " and "));
      if (state === v) o.selected = true;
      return o;
    }));
  const form = el("form", { class: "filters", id: "filters", "aria-label": "Filter items" },
    input("run", fieldLabels.run), input("pipeline", fieldLabels.pipeline), input("stage", fieldLabels.stage), input("key", fieldLabels.key),
    el("label", {}, "State ", stateSel), input("class", fieldLabels.class), input("error_contains", fieldLabels.error_contains),
    input("fingerprint", fieldLabels.fingerprint), input("action", fieldLabels.action),
    input("since", "Since (RFC 3339)"), input("until", fieldLabels.until),
    el("button", { type: "submit" }, "Filter"), link("#/dlq", "Clear"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const nf = new URLSearchParams();
    const fd = new FormData(form);
    const deflt = fd.get("action") ? "all" : "dead";
    for (const [k, v] of fd) if (v.trim() && !(k === "state" && v === deflt)) nf.set(k, v.trim());
    location.hash = "#/dlq?" + nf;
  });
  return form;
}

// filterError says which filter field the server refused and why.
function filterError(e) {
  const label = fieldLabels[e.field] || e.field;
  return el("p", { class: "error", id: "filter-error", role: "alert" }, "Error: " + (label ? label + ": " : "") + e.message);
}

async function viewDLQ(params) {
  const f = filterOf(params);
  const defaultState = f.action ? "all" : "dead";
  const state = params.get("state") || defaultState;
  const dlq = dlqStates.includes(state);
  const title = f.action ? "Items changed by audit entry #" + f.action : dlq ? "Dead letters" : "Items: " + (state === "all" ? "any state" : state);
  const unknown = [...params.keys()].find((k) => !dlqFilters.includes(k) && k !== "cursor" && k !== "back");
  if (unknown) {
    return [el("h1", {}, title), filterForm(params, state, defaultState),
      filterError(new ApiError("unknown filter " + unknown + " (filters: " + dlqFilters.join(", ") + ")", ""))];
  }
  if (!stateChoices.includes(state)) {
    return [el("h1", {}, title), filterForm(params, state, defaultState, "state"),
      filterError(new ApiError("unknown state “" + state + "” (one of " + stateChoices.join(", ") + ")", "state"))];
  }
  const fq = new URLSearchParams(f);
  fq.delete("state");
  const st = new URLSearchParams(fq);
  if (state !== "all") st.set("state", state);
  const q = new URLSearchParams(st);
  q.set("limit", "50");
  if (params.get("cursor")) q.set("cursor", params.get("cursor"));
  let page, total, groups;
  try {
    [page, total, groups] = await Promise.all([api((dlq ? "/dlq?" : "/items?") + q), api("/count?" + st),
      dlq ? api("/errors?" + st) : Promise.resolve(null)]);
  } catch (e) {
    if (!(e instanceof ApiError) || e.status >= 500) throw e;
    return [el("h1", {}, title), filterForm(params, state, defaultState, e.field), filterError(e)];
  }
  const groupRows = (groups ? groups.data : []).map((g) => {
    const to = new URLSearchParams(st);
    to.delete("state");
    if (state !== "dead") to.set("state", state);
    to.set("pipeline", g.pipeline);
    to.set("stage", g.stage);
    to.set("class", g.class);
    to.set("fingerprint", g.fingerprint);
    return el("tr", { "data-key": "g " + g.pipeline + " " + g.stage + " " + g.class + " " + g.fingerprint },
      el("td", {}, g.stage), el("td", {}, g.class),
      el("td", {}, el("code", {}, g.fingerprint), g.messages > 1 ? el("div", { class: "muted" }, "e.g. " + g.examples[0]) : null),
      el("td", { class: "num" }, g.dead), el("td", { class: "num" }, g.failures), el("td", { class: "num" }, g.messages),
      el("td", {}, g.dead ? link("#/dlq?" + to, "Show dead items") : ""));
  });
  return [el("h1", {}, title), filterForm(params, state, defaultState),
    el("p", { class: "total", id: "dlq-total" }, total.total + (total.total === 1 ? " item matches" : " items match") +
      " the filter · showing " + page.data.length + " on this page"),
    actionBar(f, total.total, state), statusLine(),
    groups ? el("h2", {}, "Errors by cause") : null,
    groups ? table(["Stage", "Class", "Cause", "#Dead", "#Failed attempts", "#Messages", ""], groupRows) : null,
    el("h2", {}, "Items"),
    table(itemHead, itemRows(page.data)), pager(page.next_cursor, "#/dlq", params)];
}

// markedKinds are the actions that mark the items they change, so that
// their audit entry selects exactly those items (the action filter).
const markedKinds = ["redrive", "cancel", "retry_now"];

// auditSelection says in words what an audit entry's action selected.
function auditSelection(a) {
  const f = Object.fromEntries(new URLSearchParams(a.filter || ""));
  // A redrive or purge selects dead items unless its filter says otherwise.
  if (!f.state && (a.kind === "redrive" || a.kind === "purge")) f.state = "dead";
  if (a.kind === "pause" || a.kind === "resume") return "stage " + f.pipeline + " / " + f.stage;
  if (a.kind === "outbox_redrive") return "notifications" + (f.pipeline ? " of pipeline " + f.pipeline : "") + (f.limit ? " · at most " + f.limit : "");
  return describeFilter(f);
}

// auditTarget links an audit entry to what its action changed: the items
// it marked (#/dlq?action=N, whatever state they are in now), the item of
// an action on one item, or the stage of a pause.
function auditTarget(a) {
  const f = Object.fromEntries(new URLSearchParams(a.filter || ""));
  const n = a.count;
  if (a.kind === "pause" || a.kind === "resume") return link("#/stages?pipeline=" + encodeURIComponent(f.pipeline || ""), "the stage");
  if (a.kind === "purge") return el("span", { class: "muted" }, items(n) + " deleted");
  if (a.kind === "outbox_redrive") return n + (n === 1 ? " notification" : " notifications");
  if (!markedKinds.includes(a.kind)) return String(n);
  const ids = (f.ids || "").split(",").filter(Boolean);
  if (ids.length === 1) return link("#/items/" + ids[0], "item #" + ids[0]);
  return el("a", { href: "#/dlq?action=" + a.id, "aria-label": "the " + items(n) + " of audit entry " + a.id }, items(n));
}

async function viewAudit(params) {
  const q = new URLSearchParams({ limit: "50" });
  if (params.get("cursor")) q.set("cursor", params.get("cursor"));
  const page = await api("/audit?" + q);
  const rows = page.data.map((a) => el("tr", { "data-key": "a" + a.id },
    el("td", { class: "when" }, time(a.at)), el("td", { class: "wrap" }, a.actor), el("td", {}, pill(a.kind)),
    el("td", { class: "wrap" }, auditSelection(a)),
    el("td", { class: "num" }, auditTarget(a)), el("td", { class: "wrap" }, a.detail || "")));
  return [el("h1", {}, "Audit log"),
    el("p", { class: "muted" }, "Every action operators took on items and stages, newest first, through the console, the API or the command line. " +
      "The items column opens the items an action changed, whatever state they are in now."),
    el("div", { class: "table-wrap" }, table(["At", "Who", "Action", "Selection", "#Items", "How"], rows, "audit-log")),
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
      markedKinds.includes(a.kind) ? link("#/dlq?action=" + a.id, "every item of this action") : link("#/audit", "audit log")))]);
  const timeline = [...attempts, ...marks].sort((x, y) => new Date(x[0]) - new Date(y[0])).map((x) => x[1]);
  return [
    el("h1", {}, "Item #" + it.id + " ", pill(it.state)),
    el("p", {}, "Run ", link("#/runs/" + it.run_id, "#" + it.run_id), " · pipeline " + it.pipeline +
      " · stage " + it.stage + (it.key ? " · key " + it.key : "") + " · enqueued " + time(it.enqueued_at) +
      (it.state === "pending" ? " · due " + time(it.next_at) : "")),
    it.reason ? el("p", { class: "error" }, "Reason: " + it.reason.class + " at stage " + it.reason.stage +
      " after " + it.reason.attempts + (it.reason.attempts === 1 ? " attempt: " : " attempts: ") + it.reason.error) : null,
    itemActionBar(it, d.attempts), statusLine(),
    el("h2", {}, "Attempts and actions"),
    timeline.length ? el("ol", { class: "timeline", id: "timeline" }, timeline) : el("p", { class: "muted" },
      it.state === "pending" || it.state === "running" ? "No attempts yet." : "No attempts: it never ran."),
    el("h2", {}, "Input"), el("pre", {}, decode(it.input, it.input_encoding)),
    el("h2", {}, it.state === "succeeded" ? "Output" : "Current payload"), el("pre", {}, decode(it.payload, it.payload_encoding)),
  ];
}

// build returns the nodes of the view of path.
async function build(path, params) {
  let m;
  if ((m = path.match(/^\/runs\/(\d+)$/))) return viewRun(m[1], params);
  if ((m = path.match(/^\/items\/(\d+)$/))) return viewItem(m[1]);
  if (path === "/dlq") return viewDLQ(params);
  if (path === "/audit") return viewAudit(params);
  if (path === "/workers") return viewWorkers();
  if (path === "/stages") return viewStages(params);
  return viewRuns(params);
}

// Rendering. A view is built from the API, then shown: going to a view
// replaces the page; a refresh of the view on screen patches it instead
// (reconcile), so that what the operator is using is never rebuilt: the
// focused element, an open table of a chart, the result of an action
// (data-keep). Renders are numbered: a render that finishes after a newer
// one started is dropped, so a slow refresh never undoes an action's.
let renderSeq = 0;
let shown = null; // the location of the view on screen
let carried = ""; // an action's result to show on the next view (a purged item's run)

async function route(opts) {
  const refreshing = !!(opts && opts.refresh);
  const hash = location.hash;
  const [path, qs] = (hash.slice(1) || "/").split("?");
  const params = new URLSearchParams(qs || "");
  const seq = ++renderSeq;
  let view;
  try {
    view = [await build(path, params)].flat(2).filter(Boolean);
  } catch (e) {
    view = e instanceof AuthError ? tokenPanel(e) : [el("p", { class: "error" }, "Error: " + e.message)];
  }
  if (seq !== renderSeq) return false;
  if (refreshing && hash === shown) {
    reconcile(main, view);
    return true;
  }
  // A keyboard user who filtered from a field keeps the focus in it: the
  // new view's element of the same id takes it.
  const a = document.activeElement;
  const focusID = a && a !== document.body && main.contains(a) ? a.id : "";
  main.replaceChildren(...view);
  shown = hash;
  if (focusID) {
    const same = document.getElementById(focusID);
    if (same && main.contains(same)) same.focus({ preventScroll: true });
  }
  if (carried) {
    setStatus(carried);
    carried = "";
  }
  return true;
}

// refresh updates the view on screen from the API, keeping what the
// operator uses (see reconcile); window.redriveRefreshes counts the
// refreshes applied, for tests and for the curious.
window.redriveRefreshes = 0;
async function refresh() {
  if (await route({ refresh: true })) {
    window.redriveRefreshes++;
    document.body.dataset.refreshes = String(window.redriveRefreshes);
  }
}

// keyOf names an element across renders: its id or its data-key.
const keyOf = (n) => (n.nodeType === 1 ? n.id || n.getAttribute("data-key") || "" : "");

// inUse reports a subtree the operator is using: it holds the focus, an
// open <details> or a node kept across refreshes.
const inUse = (n) => n.contains(document.activeElement) || n.matches("details[open], [data-keep]") ||
  !!n.querySelector("details[open], [data-keep]");

let refocus = null;

// patch returns the node to show for new node n where o is: o itself when
// it is the same or in use (then patched to n's attributes and children),
// else n.
function patch(o, n) {
  if (o.nodeType !== n.nodeType || o.nodeName !== n.nodeName || keyOf(o) !== keyOf(n)) return n;
  if (o.nodeType === Node.TEXT_NODE) {
    if (o.data !== n.data) o.data = n.data;
    return o;
  }
  if (o.nodeType !== Node.ELEMENT_NODE) return n;
  if (o.hasAttribute("data-keep") || o.isEqualNode(n)) return o;
  if (o === document.activeElement) {
    // A field keeps what is typed in it; a button or link whose label or
    // target changed is replaced, and the focus moves to its replacement.
    if (/^(INPUT|SELECT|TEXTAREA)$/.test(o.tagName)) return o;
    refocus = n;
    return n;
  }
  if (!inUse(o)) return n;
  for (const a of [...o.attributes]) {
    if (!n.hasAttribute(a.name) && !(a.name === "open" && o.tagName === "DETAILS")) o.removeAttribute(a.name);
  }
  for (const a of n.attributes) if (o.getAttribute(a.name) !== a.value) o.setAttribute(a.name, a.value);
  patchChildren(o, n);
  return o;
}

// patchChildren makes o's children those of n, reusing o's where patch
// allows. Reused children are never moved unless their order changed, so
// the focused element stays in the document and keeps the focus.
function patchChildren(o, n) {
  const old = [...o.childNodes];
  const keyed = new Map();
  for (const c of old) if (keyOf(c)) keyed.set(keyOf(c), c);
  const used = new Set();
  const out = [...n.childNodes].map((c, i) => {
    const k = keyOf(c);
    const match = k ? keyed.get(k) : old[i] && !keyOf(old[i]) ? old[i] : undefined;
    if (!match || used.has(match)) return c;
    const r = patch(match, c);
    if (r === match) used.add(match);
    return r;
  });
  for (const c of old) if (!used.has(c)) c.remove();
  out.forEach((c, i) => {
    if (o.childNodes[i] !== c) o.insertBefore(c, o.childNodes[i] || null);
  });
}

// reconcile shows view in parent, patching the nodes on screen.
function reconcile(parent, view) {
  const next = document.createElement(parent.tagName);
  next.append(...view);
  refocus = null;
  patchChildren(parent, next);
  if (refocus && refocus.isConnected && document.activeElement !== refocus) refocus.focus({ preventScroll: true });
  refocus = null;
}

window.addEventListener("hashchange", () => route());
loadServer().then(() => route());

// Live refresh: the view on screen is updated every 5 s (see reconcile),
// except while the operator confirms an action or types a token, while the
// tab is hidden, or while text is selected.
const refreshPeriod = 5000;
let refreshRunning = false;
setInterval(async () => {
  if (refreshRunning || window.redriveBusy || document.hidden || document.querySelector("dialog[open]") ||
    document.getElementById("read-token-form")) return;
  if (String(window.getSelection ? window.getSelection() : "")) return;
  refreshRunning = true;
  try {
    await refresh();
  } finally {
    refreshRunning = false;
  }
}, refreshPeriod);
