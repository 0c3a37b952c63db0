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
// Run as a program, it submits --count demo items to --pipeline, submits the
// same batch again (as a client that lost the first answer would), waits for
// every item and prints a JSON summary on stdout.

import { randomUUID } from "node:crypto";
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

// Webhook receiver: notifications of dead and succeeded items (signed with
// HMAC-SHA256) arrive with the webhook outbox, which this server version does
// not have yet. Until then, poll with Client.wait. The receiver and its
// signature check belong here.

async function main() {
  const { values } = parseArgs({
    options: {
      url: { type: "string", default: "http://127.0.0.1:8080" },
      "token-env": { type: "string", default: "REDRIVE_TOKEN" },
      pipeline: { type: "string" },
      run: { type: "string", default: "node-demo" },
      count: { type: "string", default: "10" },
    },
  });
  if (!values.pipeline) throw new Error("--pipeline is required");
  const client = new Client(values.url, { token: process.env[values["token-env"]] ?? "" });
  const items = Array.from({ length: Number(values.count) }, (_, i) => ({ key: `node-${i}`, input: { n: i, from: "node" } }));
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
  console.log(JSON.stringify({
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
