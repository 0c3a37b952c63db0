// Actions of the operators' console: every write applies to everything the
// current filter selects (not only the loaded page), shows the dry-run count
// first and asks for confirmation. Loaded before app.js, which provides el.
"use strict";

// modal shows a dialog with body nodes and buttons; it resolves with the
// value of the button pressed (Escape resolves with "cancel"). opts.focus
// names the button focused when it opens (default: the first field or
// button); opts.enter is the value Enter in a field answers (default: none,
// Enter in a field does nothing).
function modal(title, body, buttons, opts) {
  const o = opts || {};
  return new Promise((resolve) => {
    const d = el("dialog", { "aria-labelledby": "modal-title" },
      el("h2", { id: "modal-title" }, title), ...body,
      el("p", { class: "buttons" }, buttons.map(([value, label]) => {
        const b = el("button", { type: "button", value }, label);
        if (value === o.focus) b.autofocus = true;
        b.addEventListener("click", () => d.close(value));
        return b;
      })));
    // Enter in a field answers on its release: closing on the press would
    // hand the rest of the key to the element that gets the focus back,
    // which a button takes as a click. Only an Enter pressed in the
    // dialog counts: the release of the one that opened it does not.
    let entered = false;
    d.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && ev.target.tagName === "INPUT") {
        ev.preventDefault();
        entered = true;
      }
    });
    d.addEventListener("keyup", (ev) => {
      if (ev.key === "Enter" && ev.target.tagName === "INPUT" && entered && o.enter) d.close(o.enter);
    });
    d.addEventListener("close", () => { d.remove(); resolve(d.returnValue || "cancel"); });
    document.body.append(d);
    d.showModal();
  });
}

// post sends an action with a kept token that grants the admin scope,
// asking for one when none does (why says what it is for) and again when
// the server refuses it. It resolves with the response, or null when no
// token was given.
async function post(path, body, why) {
  if (server.configured.length && !server.configured.includes("admin")) {
    throw new Error("actions are disabled on this server: no token has the admin scope (see redrive serve --token-file)");
  }
  let refused = "";
  for (;;) {
    const t = tokenFor("admin") || (await askToken("admin", why, refused));
    if (!t) return null;
    const res = await fetch("/api/v1" + path, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json", Authorization: "Bearer " + t.secret },
      body: JSON.stringify(body),
    });
    const data = await res.json().catch(() => ({ error: res.statusText }));
    if (res.status === 401) {
      forgetToken(t.secret);
      refused = t.name;
      continue;
    }
    if (!res.ok) throw new ApiError(data.error || res.statusText, data.field, res.status);
    return data;
  }
}

// requestOf turns the URL filter into the body of the write endpoints.
function requestOf(f) {
  const r = {};
  if (f.run) r.run = Number(f.run);
  if (f.action) r.action = Number(f.action);
  for (const k of ["pipeline", "stage", "key", "class", "error_contains", "fingerprint", "since", "until"]) if (f[k]) r[k] = f[k];
  if (f.state) r.states = f.state.split(",");
  return r;
}

const items = (n) => n + (n === 1 ? " item" : " items");
const cap = (s) => s[0].toUpperCase() + s.slice(1);

// statusLine is where an action's result is said. It is kept across the
// view's refreshes (data-keep), so a result stays until the operator goes
// to another view.
const statusLine = () => el("p", { id: "action-status", role: "status", "aria-live": "polite", "data-keep": "" });

function setStatus(text) {
  const s = document.getElementById("action-status");
  if (s) s.textContent = text;
}

// act runs one action: the dry run, the confirmation (which says what is
// done, to which selection and how many items, and opens on "Do nothing"),
// then the write. a.describe(n) says what happens to n items; a.selection
// says in words what the filter selects; a.then, when set, is the view to
// show after a write that succeeded (the run of a purged item, whose own
// page is gone).
async function act(a) {
  window.redriveBusy = true;
  const why = cap(a.what) + " changes items.";
  try {
    const dry = await post(a.path, { ...a.body, dry_run: true }, why);
    if (!dry) {
      setStatus("Nothing changed: no token with the admin scope was given.");
      return;
    }
    if (dry.count === 0) {
      setStatus("Nothing to " + a.what + ": no item matches the filter.");
      return;
    }
    const answer = await modal("Confirm: " + a.what + " " + items(dry.count), [
      el("dl", { class: "confirm" },
        el("dt", {}, "Action"), el("dd", { id: "confirm-action" }, a.describe(dry.count)),
        el("dt", {}, "Selection"), el("dd", { id: "confirm-selection" }, a.selection),
        el("dt", {}, "Items"), el("dd", { id: "confirm-count" }, items(dry.count) + ", counted by a dry run just now"))],
    [["cancel", "Do nothing"], ["confirm", cap(a.what) + " " + items(dry.count)]], { focus: "cancel" });
    if (answer !== "confirm") {
      setStatus("Nothing changed.");
      return;
    }
    const done = await post(a.path, a.body, why);
    if (!done) {
      setStatus("Nothing changed: no token with the admin scope was given.");
      return;
    }
    const text = cap(a.what) + ": " + done.count + (done.count === 1 ? " item." : " items.") + (done.warning ? " " + done.warning : "");
    if (a.then) {
      carried = text;
      location.hash = a.then;
      return;
    }
    setStatus(text);
  } catch (e) {
    setStatus("Error: " + e.message);
  } finally {
    window.redriveBusy = false;
  }
  await refresh();
}

// actionBar offers the actions on everything the filter f selects in
// state (dead and canceled: redrive, purge, export; pending: cancel, retry
// now; other states: none). Its result goes to the view's statusLine.
function actionBar(f, total, state) {
  const section = (...children) => el("section", { class: "actions", id: "actions", "aria-label": "Actions on every matching item" },
    el("span", {}, "On all " + items(total) + " matching: "), ...children);
  const sel = { ...f, state };
  if (state === "pending") {
    const body = requestOf(sel);
    const reason = el("input", { id: "cancel-reason", size: 24, placeholder: "reason" });
    const cancel = el("button", { type: "button", id: "act-cancel" }, "Cancel pending…");
    cancel.addEventListener("click", () => {
      const r = { ...body, reason: reason.value.trim() };
      if (!Object.keys(body).some((k) => k !== "states")) r.all = true;
      act({ what: "cancel", path: "/items/cancel", body: r, selection: describeFilter(sel),
        describe: (n) => items(n) + (n === 1 ? " is" : " are") + " canceled" +
          (r.reason ? " with the reason “" + r.reason + "”." : ".") + " Running items finish their attempt and are left alone." });
    });
    const retry = el("button", { type: "button", id: "act-retry-now" }, "Retry now…");
    retry.addEventListener("click", () => act({ what: "retry now", path: "/items/retry-now", body, selection: describeFilter(sel),
      describe: (n) => items(n) + " waiting on a backoff become due now. Their attempts are neither spent nor reset." }));
    return section(el("label", { for: "cancel-reason" }, "reason "), reason, " ", cancel, " ", retry);
  }
  if (state !== "dead" && state !== "canceled" && state !== "dead,canceled") {
    return section(el("span", { class: "muted" }, state === "all"
      ? "pick a state (dead, canceled or pending) to act on these items."
      : "no actions apply to " + state + " items."));
  }
  const rate = el("input", { id: "redrive-rate", type: "number", min: "0", step: "any", value: "0", size: 6 });
  const from = el("input", { id: "redrive-from", size: 10, placeholder: "failed stage" });
  const body = requestOf(f);
  const redrive = el("button", { type: "button", id: "act-redrive" }, "Redrive…");
  redrive.addEventListener("click", () => {
    const r = { ...body, rate: Number(rate.value) || 0 };
    if (from.value.trim()) r.from_stage = from.value.trim();
    act({ what: "redrive", path: "/dlq/redrive", body: r, selection: describeFilter(sel),
      describe: (n) => n + (n === 1 ? " item goes" : " items go") + " back to pending" +
        (r.from_stage ? " at stage " + r.from_stage : " at the stage they stopped at") +
        (r.rate ? ", " + r.rate + " per second." : ", all due now.") });
  });
  const purge = el("button", { type: "button", id: "act-purge" }, "Purge…");
  purge.addEventListener("click", () => act({ what: "purge", path: "/dlq/purge", body: Object.keys(body).length ? body : { ...body, all: true },
    selection: describeFilter(sel),
    describe: (n) => n + (n === 1 ? " item is" : " items are") + " deleted with their attempts. Their runs keep counting them as purged. This cannot be undone." }));
  const exp = new URLSearchParams(f);
  return section(
    el("label", { for: "redrive-rate" }, "rate/s "), rate, " ",
    el("label", { for: "redrive-from" }, "from stage "), from, " ", redrive, " ", purge, " ",
    el("a", { href: "/api/v1/dlq/export?" + exp, id: "act-export", download: "redrive-dlq.jsonl" }, "Export JSONL"));
}

// itemActionBar offers the actions that apply to one item in its state:
// redrive (from the failed stage or an earlier one it reached) and purge
// for a dead or canceled item; cancel, and retry now when it waits on a
// backoff, for a pending one. Its result goes to the view's statusLine.
function itemActionBar(it, attempts) {
  const body = { ids: [it.id], states: [it.state] };
  const selection = "item #" + it.id + " (" + it.state + ", pipeline " + it.pipeline + ", stage " + it.stage + ")";
  const buttons = [];
  const button = (id, label, onClick) => {
    const b = el("button", { type: "button", id }, label);
    b.addEventListener("click", onClick);
    buttons.push(b, " ");
  };
  if (it.state === "dead" || it.state === "canceled") {
    const stages = [...new Set(attempts.map((a) => a.stage))];
    const from = el("select", { id: "item-redrive-from" }, stages.map((st) => {
      const o = el("option", { value: st === it.stage ? "" : st }, st === it.stage ? st + " (where it stopped)" : st);
      if (st === it.stage) o.selected = true;
      return o;
    }));
    if (!stages.includes(it.stage)) from.prepend(el("option", { value: "", selected: "" }, it.stage + " (where it stopped)"));
    buttons.push(el("label", { for: "item-redrive-from" }, "from stage "), from, " ");
    button("item-redrive", "Redrive…", () => {
      const r = { ...body };
      if (from.value) r.from_stage = from.value;
      act({ what: "redrive", path: "/dlq/redrive", body: r, selection,
        describe: () => "Item #" + it.id + " goes back to pending at stage " + (r.from_stage || it.stage) + ", due now." });
    });
    button("item-purge", "Purge…", () => act({ what: "purge", path: "/dlq/purge", body, selection, then: "#/runs/" + it.run_id,
      describe: () => "Item #" + it.id + " is deleted with its attempts. This cannot be undone." }));
  } else if (it.state === "pending") {
    const reason = el("input", { id: "item-cancel-reason", size: 24, placeholder: "reason" });
    buttons.push(el("label", { for: "item-cancel-reason" }, "reason "), reason, " ");
    button("item-cancel", "Cancel…", () => act({ what: "cancel", path: "/items/cancel", body: { ids: [it.id], reason: reason.value.trim() },
      selection, describe: () => "Item #" + it.id + " is canceled" + (reason.value.trim() ? " with the reason “" + reason.value.trim() + "”." : ".") }));
    if (new Date(it.next_at) > new Date()) {
      button("item-retry-now", "Retry now…", () => act({ what: "retry now", path: "/items/retry-now", body: { ids: [it.id] }, selection,
        describe: () => "Item #" + it.id + " becomes due now; its attempt count stays " + it.attempt + "." }));
    }
  }
  if (!buttons.length) return el("section", { class: "actions", id: "actions", "aria-label": "Actions on this item" },
    el("span", { class: "muted" }, "No action applies to a " + it.state + " item."));
  return el("section", { class: "actions", id: "actions", "aria-label": "Actions on this item" }, el("span", {}, "This item: "), ...buttons);
}
