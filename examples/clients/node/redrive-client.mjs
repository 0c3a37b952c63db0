#!/usr/bin/env node
// A redrive HTTP API client for Node (18 or later), without dependencies.
//
//   const client = new Client("http://127.0.0.1:8080", { token: process.env.REDRIVE_TOKEN });
//   const res = await client.submit("summarize", [{ key: "doc-1", input: { url: "..." } }], { run: "nightly" });
//   const item = await client.wait(res.items[0].id); // { item, output, attempts }
//
// A submit is retried on network errors, 429 and 5xx with the same
// Idempotency-Key, so a retry never adds an item twice. See docs/api.md and
// docs/openapi.yaml.
//
// Webhooks and item callbacks are received by WebhookReceiver, which
// verifies each request's Redrive-Signature (HMAC-SHA256 over the timestamp,
// a "." and the raw body, within a tolerance) and deduplicates by the
// Redrive-Delivery ID, since delivery is at least once:
//
//   const rx = await new WebhookReceiver(process.env.REDRIVE_CALLBACK_SECRET).start();
//   await client.submit("summarize", [{ input: {...}, callback: rx.url }]);
//
// Run as a program, it submits --count demo items to --pipeline, submits the
// same batch again (as a client that lost the first answer would), waits for
// every item and prints a JSON summary on stdout. With --callback-secret-env
// it also receives the items' callbacks, and shows that a replayed delivery
// is deduplicated and a tampered one refused.

import { createHmac, randomUUID, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";
import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";

const FINAL_STATES = new Set(["succeeded", "dead", "canceled"]);

export class APIError extends Error {
  constructor(status, message, field = "") {
    super(`${status}: ${message}${field ? ` (field ${field})` : ""}`);
    this.status = status;
    this.field = field;
  }
}

export class Client {
  constructor(baseURL, { token = "", attempts = 5, timeoutMs = 30000 } = {}) {
    this.baseURL = baseURL.replace(/\/+$/, "");
    this.token = token;
    this.attempts = attempts;
    this.timeoutMs = timeoutMs;
  }

  async request(method, path, body, headers = {}) {
    const h = { Accept: "application/json", ...headers };
    if (body !== undefined) h["Content-Type"] = "application/json";
    if (this.token) h.Authorization = `Bearer ${this.token}`;
    let delay = 200;
    for (let attempt = 1; ; attempt++) {
      let resp;
      try {
        resp = await fetch(this.baseURL + path, {
          method,
          headers: h,
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(this.timeoutMs),
        });
      } catch (err) {
        if (attempt >= this.attempts) throw err;
        await sleep(delay);
        delay = Math.min(delay * 2, 5000);
        continue;
      }
      const text = await resp.text();
      if (resp.ok) return JSON.parse(text);
      let e = {};
      try { e = JSON.parse(text); } catch { e = { error: text }; }
      const retryable = resp.status === 429 || resp.status >= 500;
      if (!retryable || attempt >= this.attempts) throw new APIError(resp.status, e.error ?? "", e.field ?? "");
      const ra = Number(resp.headers.get("Retry-After"));
      await sleep(Number.isFinite(ra) && ra > 0 ? ra * 1000 : delay);
      delay = Math.min(delay * 2, 5000);
    }
  }

  // submit adds items to the run named run (default "default") of pipeline.
  submit(pipeline, items, { run = "", idempotencyKey = randomUUID() } = {}) {
    const body = { items };
    if (run) body.run = run;
    return this.request("POST", `/api/v1/pipelines/${encodeURIComponent(pipeline)}/items`, body, {
      "Idempotency-Key": idempotencyKey,
    });
  }

  item(id) {
    return this.request("GET", `/api/v1/items/${id}`);
  }

  run(id) {
    return this.request("GET", `/api/v1/runs/${id}`);
  }

  // wait polls an item until it is succeeded, dead or canceled.
  async wait(id, { timeoutMs = 60000, intervalMs = 100 } = {}) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const d = await this.item(id);
      if (FINAL_STATES.has(d.item.state)) return d;
      if (Date.now() > deadline) throw new Error(`item ${id} is still ${d.item.state}`);
      await sleep(intervalMs);
    }
  }
}

export class SignatureError extends Error {}

// verifySignature checks a Redrive-Signature header ("t=UNIX,v1=HEX[,v1=HEX]")
// against the raw body, as redrive.VerifySignature does: one v1 must be the
// HMAC-SHA256 of t + "." + body keyed with secret (compared in constant
// time), and t within toleranceSec of now. Throws SignatureError.
export function verifySignature(secret, header, body, { now = Date.now() / 1000, toleranceSec = 300 } = {}) {
  let ts = null;
  const sigs = [];
  for (const part of (header ?? "").split(",")) {
    const eq = part.indexOf("=");
    if (eq < 0) throw new SignatureError(`malformed signature: ${JSON.stringify(part)} is not key=value`);
    const k = part.slice(0, eq).trim();
    const v = part.slice(eq + 1).trim();
    if (k === "t") ts = v;
    else if (k === "v1") sigs.push(v);
  }
  if (ts === null || !/^-?\d+$/.test(ts) || sigs.length === 0) throw new SignatureError("malformed signature: want t=UNIX,v1=HEX");
  const want = createHmac("sha256", secret).update(`${ts}.`).update(body).digest();
  const ok = sigs.some((s) => {
    const got = Buffer.from(s, "hex");
    return got.length === want.length && timingSafeEqual(got, want);
  });
  if (!ok) throw new SignatureError("signature does not match");
  if (Math.abs(now - Number(ts)) > toleranceSec) throw new SignatureError("signature timestamp outside the tolerance");
}

// WebhookReceiver is an HTTP server on loopback that receives redrive
// webhooks and item callbacks: it verifies every request (401 when it does
// not verify), answers 200 to each delivery once received, and keeps each
// notification once, by delivery ID.
export class WebhookReceiver {
  static MAX_BODY = 1 << 20;

  constructor(secret, { host = "127.0.0.1", port = 0, toleranceSec = 300 } = {}) {
    Object.assign(this, { secret, host, port, toleranceSec });
    this.deliveries = new Map(); // delivery ID -> parsed body
    this.duplicates = 0;
    this.rejected = 0;
    this.raw = []; // { headers, body } of verified requests, for the demo
    this.waiters = [];
    this.server = createServer((req, res) => this.handle(req, res));
  }

  handle(req, res) {
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
      size += c.length;
      if (size > WebhookReceiver.MAX_BODY) {
        res.writeHead(413).end();
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      try {
        verifySignature(this.secret, req.headers["redrive-signature"], body, { toleranceSec: this.toleranceSec });
      } catch (e) {
        if (!(e instanceof SignatureError)) throw e;
        this.rejected++;
        res.writeHead(401).end();
        return;
      }
      const id = req.headers["redrive-delivery"] ?? "";
      if (this.deliveries.has(id)) {
        this.duplicates++;
      } else {
        this.deliveries.set(id, JSON.parse(body));
        this.raw.push({ headers: req.headers, body });
        this.waiters = this.waiters.filter((w) => !w());
      }
      res.writeHead(200).end();
    });
  }

  get url() {
    const { address, port } = this.server.address();
    return `http://${address}:${port}/redrive`;
  }

  start() {
    return new Promise((resolve) => this.server.listen(this.port, this.host, () => resolve(this)));
  }

  // wait resolves with the notifications once n distinct ones arrived.
  wait(n, { timeoutMs = 60000 } = {}) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.deliveries.size} of ${n} notifications arrived`)), timeoutMs);
      const check = () => {
        if (this.deliveries.size < n) return false;
        clearTimeout(timer);
        resolve([...this.deliveries.values()]);
        return true;
      };
      if (!check()) this.waiters.push(check);
    });
  }

  close() {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections(); // the sender's idle keep-alive ones
    });
  }
}

// postRaw POSTs a body with headers as given and returns the status code.
async function postRaw(url, headers, body) {
  const resp = await fetch(url, { method: "POST", headers, body });
  await resp.arrayBuffer();
  return resp.status;
}

async function main() {
  const { values } = parseArgs({
    options: {
      url: { type: "string", default: "http://127.0.0.1:8080" },
      "token-env": { type: "string", default: "REDRIVE_TOKEN" },
      pipeline: { type: "string" },
      run: { type: "string", default: "node-demo" },
      count: { type: "string", default: "10" },
      "die-every": { type: "string", default: "0" },
      "callback-secret-env": { type: "string", default: "" },
    },
  });
  if (!values.pipeline) throw new Error("--pipeline is required");
  const client = new Client(values.url, { token: process.env[values["token-env"]] ?? "" });
  const dieEvery = Number(values["die-every"]);
  const items = Array.from({ length: Number(values.count) }, (_, i) => ({ key: `node-${i}`, input: { n: i, from: "node" } }));
  for (const [i, it] of items.entries()) {
    if (dieEvery && i % dieEvery === 0) it.input.die = true;
  }
  let rx = null;
  if (values["callback-secret-env"]) {
    rx = await new WebhookReceiver(process.env[values["callback-secret-env"]]).start();
    for (const it of items) it.callback = rx.url;
  }
  const key = randomUUID();
  const first = await client.submit(values.pipeline, items, { run: values.run, idempotencyKey: key });
  const retry = await client.submit(values.pipeline, items, { run: values.run, idempotencyKey: key });
  const states = {};
  let matches = 0;
  for (const [i, got] of first.items.entries()) {
    const d = await client.wait(got.id);
    states[d.item.state] = (states[d.item.state] ?? 0) + 1;
    if (JSON.stringify(d.output) === JSON.stringify(items[i].input)) matches++;
  }
  let unknown = null;
  try {
    await client.submit("no-such-pipeline", items.slice(0, 1));
  } catch (e) {
    if (!(e instanceof APIError)) throw e;
    unknown = { status: e.status, field: e.field };
  }
  let webhooks = null;
  if (rx) {
    const got = await rx.wait(states.dead ?? 0);
    const { headers, body } = rx.raw[0];
    const sent = {};
    for (const [k, v] of Object.entries(headers)) {
      if (k.startsWith("redrive-") || k === "content-type") sent[k] = v;
    }
    const replay = await postRaw(rx.url, sent, body); // a redelivery: accepted, kept once
    const tampered = await postRaw(rx.url, sent, Buffer.from(body.toString().replace('"item.dead"', '"item.succeeded"')));
    webhooks = {
      received: rx.deliveries.size,
      events: [...new Set(got.map((n) => n.event))].sort(),
      dead_keys: [...rx.deliveries.values()].map((n) => n.item.key).sort(),
      duplicates: rx.duplicates,
      rejected: rx.rejected,
      replay_status: replay,
      tampered_status: tampered,
    };
    await rx.close();
  }
  console.log(JSON.stringify({
    webhooks,
    run_id: first.run.id,
    added: first.added,
    existing_on_retry: retry.existing,
    same_ids: JSON.stringify(first.items.map((i) => i.id)) === JSON.stringify(retry.items.map((i) => i.id)),
    states,
    outputs_matching: matches,
    unknown_pipeline: unknown,
  }));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err) => {
    console.error(err.message);
    process.exit(1);
  });
}
