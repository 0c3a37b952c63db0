// Tokens of the operators' console. A token is asked for only when the
// server refuses a request without one: a read when reads are protected (a
// token grants the read scope), an action when it needs the admin scope.
// Each token is checked with GET /api/v1/whoami, which names it and its
// scopes, and kept in this tab's sessionStorage only (closing the tab forgets
// it). Reads use a token with the read scope, actions one with the admin
// scope: one token with both, or two. Loaded first; el, route and modal come
// from app.js and actions.js, called only once the page has loaded.
"use strict";

const tokensKey = "redrive-tokens";

// server is what GET /api/v1/whoami says without a token: whether reads are
// protected, which scopes some token grants, and the person a trusted proxy
// header names.
let server = { reads_protected: false, configured: [], actor: "", actor_header: "" };

// AuthError is a request the server refused for want of a token or scope.
class AuthError extends Error {
  constructor(message, scope, refused) {
    super(message);
    this.scope = scope;
    this.refused = refused; // the token that was refused, if one was sent
  }
}

function tokens() {
  try {
    const list = JSON.parse(sessionStorage.getItem(tokensKey) || "[]");
    return Array.isArray(list) ? list : [];
  } catch (e) {
    return [];
  }
}

function saveTokens(list) {
  if (list.length) sessionStorage.setItem(tokensKey, JSON.stringify(list));
  else sessionStorage.removeItem(tokensKey);
  showIdentity();
}

// tokenFor returns the kept token that grants scope, or undefined.
const tokenFor = (scope) => tokens().find((t) => t.scopes.includes(scope));

// forgetToken drops a token the server refused (rotated, revoked).
function forgetToken(secret) {
  saveTokens(tokens().filter((t) => t.secret !== secret));
}

// whoami asks the server what a token grants (none: what needs one).
async function whoami(secret) {
  const headers = { Accept: "application/json" };
  if (secret) headers.Authorization = "Bearer " + secret;
  const res = await fetch("/api/v1/whoami", { headers });
  const body = await res.json().catch(() => ({ error: res.statusText }));
  if (res.status === 401) return null;
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

// addToken checks secret with the server and keeps it (replacing a kept
// token of the same name). It returns the token, or null when the server
// does not know it.
async function addToken(secret) {
  const w = await whoami(secret);
  if (!w || !w.token) return null;
  const t = { secret, name: w.token.name, scopes: w.token.scopes };
  saveTokens([...tokens().filter((x) => x.name !== t.name && x.secret !== secret), t]);
  return t;
}

const scopesText = (t) => t.name + " (" + (t.scopes.join(", ") || "no scope") + ")";

// askToken asks, in a dialog, for a token with scope; why says what needs
// it. A token without the scope is kept (it may serve another scope) and the
// dialog asks again, saying what it lacks. It resolves with the token, or
// null when the operator cancels.
async function askToken(scope, why, refused) {
  let note = refused ? "The token " + refused + " was refused: enter another." : "";
  let title = refused ? "The token was refused: enter another" : "API token";
  for (;;) {
    const input = el("input", { type: "password", id: "token-input", autocomplete: "off", size: 32 });
    const kept = tokens();
    const answer = await modal(title, [
      el("p", {}, why + " It needs a token with the " + scope + " scope, kept in this tab's session storage only."),
      kept.length ? el("p", { class: "muted" }, "Tokens in this tab: " + kept.map(scopesText).join("; ") + ".") : null,
      note ? el("p", { class: "error", role: "alert" }, note) : null,
      el("label", { for: "token-input" }, "Token "), input],
    [["ok", "Use token"], ["cancel", "Cancel"]], { enter: "ok" });
    const secret = input.value.trim();
    if (answer !== "ok" || !secret) return null;
    const t = await addToken(secret);
    if (!t) {
      title = "The token was refused: enter another";
      note = "The server does not know that token.";
      continue;
    }
    if (t.scopes.includes(scope)) return t;
    title = "Token " + t.name + " lacks the " + scope + " scope";
    note = "Token " + t.name + " grants " + (t.scopes.join(" and ") || "nothing") + "; this needs " + scope +
      ". It is kept for what it grants; enter a token with the " + scope + " scope.";
  }
}

// tokenPanel is the view shown when a read is refused: a form for a token
// with the read scope, focused, that shows the view again once one is kept.
function tokenPanel(err) {
  const input = el("input", { type: "password", id: "read-token-input", autocomplete: "off", size: 32, required: "" });
  const kept = tokens();
  const msg = el("p", { class: "error", id: "read-token-error", role: "alert" },
    err.refused ? "The token " + err.refused + " was refused: the server no longer knows it."
      : kept.length ? "The tokens of this tab (" + kept.map(scopesText).join(", ") + ") do not grant read." : "");
  const form = el("form", { class: "token-form", id: "read-token-form", "aria-labelledby": "read-token-title" },
    el("label", { for: "read-token-input" }, "Token "), input, " ", el("button", { type: "submit" }, "Use token"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const t = await addToken(input.value.trim());
    if (!t) {
      msg.textContent = "The server does not know that token: enter another.";
      input.select();
      return;
    }
    if (!t.scopes.includes("read")) {
      msg.textContent = "Token " + t.name + " grants " + (t.scopes.join(" and ") || "nothing") +
        ", not read: it is kept for actions; enter a token with the read scope to see this view.";
      input.value = "";
      return;
    }
    route();
  });
  setTimeout(() => input.isConnected && input.focus(), 0);
  return [el("h1", { id: "read-token-title" }, "A token is needed to read"),
    el("p", {}, "This server protects its data: every view needs a token with the read scope (ask whoever runs redrive serve for one). " +
      "The token is sent to this server only and kept in this tab's session storage until the tab is closed."),
    form, msg];
}

// showIdentity says in the header which tokens this tab holds, with their
// scopes, or that reads are open, and who actions are recorded as.
function showIdentity() {
  const box = document.getElementById("identity");
  if (!box) return;
  const kept = tokens();
  const parts = [];
  if (server.actor) parts.push(el("span", {}, "Acting as ", el("b", {}, server.actor)));
  if (kept.length) {
    parts.push(el("span", { id: "identity-tokens" }, (kept.length === 1 ? "Token " : "Tokens ") + kept.map(scopesText).join(", ")));
    const forget = el("button", { type: "button", id: "forget-tokens", class: "linklike" }, "Forget");
    forget.addEventListener("click", () => {
      saveTokens([]);
      route();
    });
    parts.push(forget);
  } else {
    parts.push(el("span", { id: "identity-tokens", class: "muted" },
      server.reads_protected ? "No token: reads need one" : "Reads open; actions ask for a token"));
  }
  box.replaceChildren(...parts.flatMap((p, i) => (i ? [" · ", p] : [p])));
}

// loadServer reads what the server needs before the first view.
async function loadServer() {
  try {
    server = (await whoami()) || server;
  } catch (e) {
    // The views say what is wrong.
  }
  showIdentity();
}
