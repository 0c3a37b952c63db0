// Actions of the operators' console: every write applies to everything the
// current filter selects (not only the loaded page), shows the dry-run count
// first and asks for confirmation. Loaded before app.js, which provides el.
"use strict";

const tokenKey = "redrive-token";

// modal shows a dialog with body nodes and buttons; it resolves with the
// value of the button pressed (Escape resolves with "cancel").
function modal(title, body, buttons) {
  return new Promise((resolve) => {
    const d = el("dialog", { "aria-labelledby": "modal-title" },
      el("h2", { id: "modal-title" }, title), ...body,
      el("p", { class: "buttons" }, buttons.map(([value, label]) => {
        const b = el("button", { type: "button", value }, label);
        b.addEventListener("click", () => d.close(value));
        return b;
      })));
    d.addEventListener("close", () => { d.remove(); resolve(d.returnValue || "cancel"); });
    document.body.append(d);
    d.showModal();
  });
}

// token returns the write token, asking for it once per browser session.
async function token(again) {
  let t = sessionStorage.getItem(tokenKey);
  if (t && !again) return t;
  const input = el("input", { type: "password", id: "token-input", autocomplete: "off", size: 32 });
  const answer = await modal(again ? "The token was refused: enter another" : "API token", [
    el("p", {}, "Actions need a token with the admin scope. It is kept in this tab's session storage only."),
    el("label", { for: "token-input" }, "Token "), input], [["ok", "Use token"], ["cancel", "Cancel"]]);
  t = input.value.trim();
  if (answer !== "ok" || !t) return null;
  sessionStorage.setItem(tokenKey, t);
  return t;
}

// post sends a write with the token, asking again once if it is refused.
async function post(path, body) {
  for (let again = false; ; again = true) {
    const t = await token(again);
    if (!t) return null;
    const res = await fetch("/api/v1" + path, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json", Authorization: "Bearer " + t },
      body: JSON.stringify(body),
    });
    const data = await res.json().catch(() => ({ error: res.statusText }));
    if ((res.status === 401 || res.status === 403) && !again) {
      sessionStorage.removeItem(tokenKey);
      if (res.status === 403) throw new Error(data.error || "forbidden");
      continue;
    }
    if (!res.ok) throw new Error(data.error || res.statusText);
    return data;
  }
}

// requestOf turns the URL filter into the body of the write endpoints.
function requestOf(f) {
  const r = {};
  if (f.run) r.run = Number(f.run);
  for (const k of ["pipeline", "stage", "key", "class", "error_contains", "fingerprint", "since", "until"]) if (f[k]) r[k] = f[k];
  if (f.state) r.states = f.state.split(",");
  return r;
}

const items = (n) => n + (n === 1 ? " item" : " items");

// act runs one action: the dry run, the confirmation, then the write;
// then, when set, is the view to show after a write that succeeded (the
// run of a purged item, whose own page is gone).
async function act(what, path, body, describe, then) {
  const status = document.getElementById("action-status");
  window.redriveBusy = true;
  try {
    const dry = await post(path, { ...body, dry_run: true });
    if (!dry) return;
    if (dry.count === 0) {
      status.textContent = "Nothing to " + what + ": no item matches the filter.";
      return;
    }
    const answer = await modal("Confirm: " + what, [el("p", {}, describe(dry.count))],
      [["confirm", what[0].toUpperCase() + what.slice(1) + " " + dry.count + (dry.count === 1 ? " item" : " items")], ["cancel", "Do nothing"]]);
    if (answer !== "confirm") {
      status.textContent = "Nothing changed.";
      return;
    }
    const done = await post(path, body);
    if (!done) return;
    status.textContent = what[0].toUpperCase() + what.slice(1) + ": " + done.count + (done.count === 1 ? " item." : " items.") +
      (done.warning ? " " + done.warning : "");
    status.dataset.done = what;
    if (then) {
      location.hash = then;
      return;
    }
  } catch (e) {
    status.textContent = "Error: " + e.message;
  } finally {
    window.redriveBusy = false;
  }
  await route();
  const shown = document.getElementById("action-status");
  if (shown) shown.textContent = status.textContent;
}

// actionBar offers the actions on everything the filter f selects in
// state (dead and canceled: redrive, purge, export; pending: cancel, retry
// now; other states: none).
function actionBar(f, total, state) {
  const status = el("p", { id: "action-status", role: "status", "aria-live": "polite" });
  const section = (...children) => el("section", { class: "actions", "aria-label": "Actions on every matching item" },
    el("span", {}, "On all " + total + " matching items: "), ...children, status);
  if (state === "pending") {
    const body = requestOf(f);
    const reason = el("input", { id: "cancel-reason", size: 24, placeholder: "reason" });
    const cancel = el("button", { type: "button", id: "act-cancel" }, "Cancel pending…");
    cancel.addEventListener("click", () => {
      const r = { ...body, reason: reason.value.trim() };
      if (!Object.keys(body).some((k) => k !== "states")) r.all = true;
      act("cancel", "/items/cancel", r, (n) => items(n) + (n === 1 ? " is" : " are") + " canceled" +
        (r.reason ? " with the reason “" + r.reason + "”." : ".") + " Running items finish their attempt and are left alone.");
    });
    const retry = el("button", { type: "button", id: "act-retry-now" }, "Retry now…");
    retry.addEventListener("click", () => act("retry now", "/items/retry-now", body, (n) =>
      items(n) + " waiting on a backoff become due now. Their attempts are neither spent nor reset."));
    return section(el("label", { for: "cancel-reason" }, "reason "), reason, " ", cancel, " ", retry);
  }
  if (state !== "dead" && state !== "canceled" && state !== "dead,canceled") {
    return section(el("span", { class: "muted" }, "no actions apply to " + state + " items."));
  }
  const rate = el("input", { id: "redrive-rate", type: "number", min: "0", step: "any", value: "0", size: 6 });
  const from = el("input", { id: "redrive-from", size: 10, placeholder: "failed stage" });
  const body = requestOf(f);
  const redrive = el("button", { type: "button", id: "act-redrive" }, "Redrive…");
  redrive.addEventListener("click", () => {
    const r = { ...body, rate: Number(rate.value) || 0 };
    if (from.value.trim()) r.from_stage = from.value.trim();
    act("redrive", "/dlq/redrive", r, (n) => n + (n === 1 ? " item goes" : " items go") + " back to pending" +
      (r.from_stage ? " at stage " + r.from_stage : " at the stage they stopped at") +
      (r.rate ? ", " + r.rate + " per second." : ", all due now."));
  });
  const purge = el("button", { type: "button", id: "act-purge" }, "Purge…");
  purge.addEventListener("click", () => act("purge", "/dlq/purge", Object.keys(body).length ? body : { ...body, all: true },
    (n) => n + (n === 1 ? " item is" : " items are") + " deleted with their attempts. Their runs keep counting them as purged. This cannot be undone."));
  const exp = new URLSearchParams(f);
  return section(
    el("label", { for: "redrive-rate" }, "rate/s "), rate, " ",
    el("label", { for: "redrive-from" }, "from stage "), from, " ", redrive, " ", purge, " ",
    el("a", { href: "/api/v1/dlq/export?" + exp, id: "act-export", download: "redrive-dlq.jsonl" }, "Export JSONL"));
}

// itemActionBar offers the actions that apply to one item in its state:
// redrive (from the failed stage or an earlier one it reached) and purge
// for a dead or canceled item; cancel, and retry now when it waits on a
// backoff, for a pending one.
function itemActionBar(it, attempts) {
  const status = el("p", { id: "action-status", role: "status", "aria-live": "polite" });
  const body = { ids: [it.id], states: [it.state] };
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
      act("redrive", "/dlq/redrive", r, () => "Item #" + it.id + " goes back to pending at stage " + (r.from_stage || it.stage) + ", due now.");
    });
    button("item-purge", "Purge…", () => act("purge", "/dlq/purge", body,
      () => "Item #" + it.id + " is deleted with its attempts. This cannot be undone.", "#/runs/" + it.run_id));
  } else if (it.state === "pending") {
    const reason = el("input", { id: "item-cancel-reason", size: 24, placeholder: "reason" });
    buttons.push(el("label", { for: "item-cancel-reason" }, "reason "), reason, " ");
    button("item-cancel", "Cancel…", () => act("cancel", "/items/cancel", { ids: [it.id], reason: reason.value.trim() },
      () => "Item #" + it.id + " is canceled" + (reason.value.trim() ? " with the reason “" + reason.value.trim() + "”." : ".")));
    if (new Date(it.next_at) > new Date()) {
      button("item-retry-now", "Retry now…", () => act("retry now", "/items/retry-now", { ids: [it.id] },
        () => "Item #" + it.id + " becomes due now; its attempt count stays " + it.attempt + "."));
    }
  }
  if (!buttons.length) return el("section", { class: "actions", "aria-label": "Actions on this item" },
    el("span", { class: "muted" }, "No action applies to a " + it.state + " item."), status);
  return el("section", { class: "actions", "aria-label": "Actions on this item" }, el("span", {}, "This item: "), ...buttons, status);
}
