#!/usr/bin/env node
// A redrive worker in Node (18 or later), no dependencies: it works an
// external stage of a pipeline served by `redrive serve`. It leases the
// stage's items over HTTP, runs your async handler on up to `concurrency`
// of them at once, heartbeats the leases while handlers run, and reports
// every result, in batches. redrive applies the stage's retry policy, rate
// limit, breaker and failure budget to those results as to a Go handler's.
//
//   import { work, Final, RateLimited } from "./redrive-worker.mjs";
//
//   await work("docs", "embed", async (job) => {   // job.input: the item's JSON input
//     if (!job.input.text) throw new Final("no text");            // dead at once, with this reason
//     const r = await fetch(MODEL_URL, { method: "POST", body: JSON.stringify(job.input) });
//     if (r.status === 429) throw new RateLimited("model quota", Number(r.headers.get("retry-after")) || undefined);
//     if (!r.ok) throw new Error(`model answered ${r.status}`);  // anything else: retryable
//     return await r.json();                                      // the output
//   }, { concurrency: 8 });                                       // until SIGTERM or SIGINT
//
// The server's URL and a token with the work scope come from the options
// url and token, or the environment variables REDRIVE_URL (default
// http://127.0.0.1:8080) and REDRIVE_TOKEN. On SIGTERM or SIGINT the worker
// stops leasing, lets running handlers finish for up to `grace` seconds,
// reports their results and releases what did not finish, so nothing waits
// for a lease to expire. A handler gets an AbortSignal (job.signal) that
// fires when its lease is lost, its stage's timeout passes or the grace
// ends. The protocol is in docs/workers.md.

import os from "node:os";
import process from "node:process";
import { pathToFileURL } from "node:url";

/** A failure that no retry can fix: the item is dead at once, with the message as its reason. */
export class Final extends Error {}

/** The dependency asked to slow down: the item (and the stage) waits retryAfter seconds. */
export class RateLimited extends Error {
  constructor(message = "rate limited", retryAfter = undefined) {
    super(message);
    this.retryAfter = retryAfter;
  }
}

/** A failure worth retrying after the policy's backoff (as is any other error). */
export class Retryable extends Error {}

/** An answer of the server that the worker cannot go on with. */
export class APIError extends Error {
  constructor(status, message, field = "") {
    super(`${status}: ${message}${field ? ` (field ${field})` : ""}`);
    this.status = status;
    this.field = field;
  }
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });

const backoff = (failures) => Math.min(5000, 50 * 2 ** failures) * (0.5 + Math.random() / 2);

function message(e) {
  if (e instanceof Final || e instanceof RateLimited || e instanceof Retryable) return e.message || e.name;
  if (e instanceof Error) return `${e.name}: ${e.message}`;
  return String(e);
}

/** Works one external stage until stop() (or SIGTERM/SIGINT in run()). */
export class Worker {
  constructor(pipeline, stage, handler, opts = {}) {
    this.pipeline = pipeline;
    this.stage = stage;
    this.handler = handler;
    this.concurrency = Math.max(1, opts.concurrency ?? 8);
    this.batch = Math.max(1, Math.min(opts.batch ?? this.concurrency, 1000));
    this.wait = Math.max(0, Math.min(opts.wait ?? 30, 30));
    this.lease = Math.max(1, opts.lease ?? 30);
    this.grace = opts.grace ?? 25;
    this.url = (opts.url ?? process.env.REDRIVE_URL ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
    this.token = opts.token ?? process.env.REDRIVE_TOKEN ?? "";
    this.name = opts.name ?? `node:${os.hostname()}:${process.pid}`;
    this.timeout = (opts.timeout ?? 60) * 1000;
    this.jobs = new Map(); // "id:token" -> job: leased, result not yet reported
    this.busy = 0;
    this.results = [];
    this.counts = { leased: 0, completed: 0, failed: 0, refused: 0, released: 0 };
    this.stopping = new AbortController();
    this.error = null;
    this.freed = null; // resolves when a handler ends
    this.reporting = null;
  }

  async post(path, body, timeoutMs = this.timeout, signal = undefined) {
    const headers = { "Content-Type": "application/json", Accept: "application/json" };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    const signals = [AbortSignal.timeout(timeoutMs)];
    if (signal) signals.push(signal);
    const res = await fetch(this.url + path, {
      method: "POST", headers, body: JSON.stringify(body), signal: AbortSignal.any ? AbortSignal.any(signals) : signals[signals.length - 1],
    });
    const text = await res.text();
    let doc = {};
    try { doc = text ? JSON.parse(text) : {}; } catch { doc = { error: text.slice(0, 200) }; }
    return [res.status, doc];
  }

  /** Asks the worker to stop: no more leases; run() finishes up. */
  stop() {
    if (!this.stopping.signal.aborted) this.stopping.abort();
    this.wakeLeaser();
  }

  wakeLeaser() {
    const f = this.freed;
    this.freed = null;
    f?.resolve();
  }

  slotFreed() {
    if (!this.freed) {
      let resolve;
      const p = new Promise((r) => { resolve = r; });
      this.freed = { promise: p, resolve };
    }
    return this.freed.promise;
  }

  /** Runs until stopped; SIGTERM and SIGINT stop it gracefully. Resolves to the counts. */
  async run({ signals = true } = {}) {
    const onSignal = () => this.stop();
    if (signals) { process.on("SIGTERM", onSignal); process.on("SIGINT", onSignal); }
    const beat = setInterval(() => this.heartbeat().catch(() => {}), (this.lease / 3) * 1000);
    const tick = setInterval(() => this.checkTimeouts(), 1000);
    try {
      await this.leaseLoop();
      await this.finish();
    } finally {
      clearInterval(beat);
      clearInterval(tick);
      if (signals) { process.off("SIGTERM", onSignal); process.off("SIGINT", onSignal); }
    }
    if (this.error) throw this.error;
    return this.counts;
  }

  async leaseLoop() {
    let failures = 0;
    while (!this.stopping.signal.aborted) {
      if (this.busy >= this.concurrency) {
        await this.slotFreed();
        continue;
      }
      const want = Math.min(this.concurrency - this.busy, this.batch);
      let status, doc;
      try {
        [status, doc] = await this.post("/api/v1/leases", {
          pipeline: this.pipeline, stage: this.stage, worker: this.name, host: os.hostname(), pid: process.pid,
          max: want, wait: this.wait, lease: this.lease,
        }, this.wait * 1000 + this.timeout, this.stopping.signal);
      } catch (e) {
        if (this.stopping.signal.aborted) return;
        failures++;
        console.error(`redrive worker: lease failed: ${e.message}`);
        await sleep(backoff(failures), this.stopping.signal);
        continue;
      }
      if (status === 429 || status >= 500) {
        failures++;
        await sleep(backoff(failures), this.stopping.signal);
        continue;
      }
      if (status !== 200) {
        this.error = new APIError(status, doc.error ?? "", doc.field ?? "");
        console.error(`redrive worker: ${this.error.message}`);
        this.stop();
        return;
      }
      failures = 0;
      for (const d of doc.leases ?? []) this.start(d);
    }
  }

  start(d) {
    const job = {
      id: d.id, token: d.token, key: d.key ?? "", run: d.run, pipeline: d.pipeline, stage: d.stage, attempt: d.attempt,
      input: d.input_encoding === "base64" ? Buffer.from(d.input, "base64") : d.input,
      timeout: d.timeout || null, started: Date.now(), done: false, lost: false, abort: new AbortController(),
      // The attempt's W3C Trace Context ("" when none): your spans' parent (docs/tracing.md).
      traceparent: d.traceparent ?? "", tracestate: d.tracestate ?? "",
    };
    job.deadline = job.timeout ? job.started + job.timeout * 1000 : null;
    job.signal = job.abort.signal;
    this.jobs.set(`${job.id}:${job.token}`, job);
    this.busy++;
    this.counts.leased++;
    this.handle(job);
  }

  async handle(job) {
    let res;
    try {
      const out = await this.handler(job);
      const output = out === undefined ? null : out;
      try {
        if (output instanceof Uint8Array) {
          // Bytes that are not JSON go as base64.
          res = ["complete", { id: job.id, token: job.token, output: Buffer.from(output).toString("base64"), output_encoding: "base64" }];
        } else {
          JSON.stringify(output);
          res = ["complete", { id: job.id, token: job.token, output }];
        }
      } catch (e) {
        res = ["fail", this.failure(job, "final", `the handler's output is not JSON: ${e.message}`)];
      }
    } catch (e) {
      if (e instanceof Final) res = ["fail", this.failure(job, "final", message(e))];
      else if (e instanceof RateLimited) {
        const f = this.failure(job, "rate_limited", message(e));
        if (e.retryAfter !== undefined && e.retryAfter !== null) f.retry_after = Math.max(0, Number(e.retryAfter));
        res = ["fail", f];
      } else res = ["fail", this.failure(job, "retryable", message(e))];
    }
    this.busy--;
    this.wakeLeaser();
    const skip = job.done || job.lost;
    job.done = true;
    if (skip) {
      if (job.lost) console.error(`redrive worker: item ${job.id} finished after its lease was lost; its result is dropped`);
      this.jobs.delete(`${job.id}:${job.token}`);
      return;
    }
    this.report(job, res);
  }

  failure(job, cls, msg) {
    return { id: job.id, token: job.token, class: cls, error: msg };
  }

  report(job, res) {
    this.results.push([job, res]);
    if (!this.reporting) this.reporting = this.reportLoop().finally(() => { this.reporting = null; });
  }

  async reportLoop() {
    // Results that come while a batch is on its way go in the next one.
    await new Promise((r) => setImmediate(r));
    while (this.results.length > 0) {
      const batch = this.results.splice(0, 1000);
      const done = batch.filter(([, r]) => r[0] === "complete");
      const failed = batch.filter(([, r]) => r[0] === "fail");
      if (done.length) await this.send("/api/v1/leases/complete", "results", done, "completed");
      if (failed.length) await this.send("/api/v1/leases/fail", "failures", failed, "failed");
    }
  }

  async send(path, key, batch, counter) {
    const body = { worker: this.name, [key]: batch.map(([, r]) => r[1]) };
    for (let failures = 0; ; failures++) {
      let status, doc;
      try {
        [status, doc] = await this.post(path, body);
      } catch (e) {
        status = 0;
        doc = { error: e.message };
      }
      if (status === 200 || status === 409) {
        const refused = (doc.results ?? []).filter((r) => !r.applied);
        this.counts[counter] += batch.length - refused.length;
        if (refused.length) {
          // A result whose lease expired or was superseded; after a retried
          // request, one that the lost answer applied.
          this.counts.refused += refused.length;
          console.error(`redrive worker: ${refused.length} results refused: ${refused[0].error ?? ""}`);
        }
        break;
      }
      if ((status >= 400 && status < 500 && status !== 429) || failures >= 50) {
        console.error(`redrive worker: reporting ${batch.length} results failed: ${status} ${doc.error ?? ""}`);
        break;
      }
      await sleep(backoff(failures + 1));
    }
    for (const [job] of batch) this.jobs.delete(`${job.id}:${job.token}`);
  }

  checkTimeouts() {
    const now = Date.now();
    for (const job of this.jobs.values()) {
      if (!job.done && !job.lost && job.deadline !== null && now > job.deadline) {
        // The stage's timeout passed: the attempt fails now, and the
        // handler's result, when it comes, is dropped.
        job.done = true;
        job.abort.abort(new Error("timeout"));
        this.report(job, ["fail", this.failure(job, "retryable", `handler timed out after ${job.timeout}s`)]);
      }
    }
  }

  async heartbeat() {
    const held = [...this.jobs.values()].filter((j) => !j.lost);
    for (let i = 0; i < held.length; i += 1000) {
      const part = held.slice(i, i + 1000);
      let status, doc;
      try {
        [status, doc] = await this.post("/api/v1/leases/heartbeat", {
          worker: this.name, leases: part.map((j) => ({ id: j.id, token: j.token })), lease: this.lease,
        });
      } catch (e) {
        console.error(`redrive worker: heartbeat failed: ${e.message}`);
        continue;
      }
      if (status !== 200 && status !== 409) continue;
      const gone = new Set((doc.results ?? []).filter((r) => !r.applied).map((r) => r.id));
      for (const j of part) {
        if (gone.has(j.id)) {
          j.lost = true;
          j.abort.abort(new Error("lease lost"));
        }
      }
      if (gone.size) console.error(`redrive worker: ${gone.size} leases lost (expired or taken over); their results are dropped`);
    }
  }

  async finish() {
    const deadline = Date.now() + this.grace * 1000;
    while (this.busy > 0 && Date.now() < deadline) {
      await Promise.race([this.slotFreed(), sleep(100)]);
    }
    while (this.reporting) await this.reporting;
    const left = [];
    for (const job of this.jobs.values()) {
      if (!job.done) {
        job.abort.abort(new Error("worker stopping"));
        job.done = true;
        left.push({ id: job.id, token: job.token });
      }
    }
    this.jobs.clear();
    try {
      for (let i = 0; i === 0 || i < left.length; i += 1000) {
        const part = left.slice(i, i + 1000);
        const [status, doc] = await this.post("/api/v1/leases/release", {
          worker: this.name, leases: part, leaving: i + 1000 >= left.length,
        });
        if (status !== 200) throw new APIError(status, doc.error ?? "", doc.field ?? "");
      }
      this.counts.released += left.length;
    } catch (e) {
      console.error(`redrive worker: releasing ${left.length} leases failed (they return when they expire): ${e.message}`);
    }
  }
}

/** Works an external stage until SIGTERM or SIGINT; resolves to the worker's counts. */
export function work(pipeline, stage, handler, opts = {}) {
  return new Worker(pipeline, stage, handler, opts).run({ signals: opts.signals ?? true });
}

// Run as a program: a worker whose handler returns its input (after
// --sleep seconds), for trying a server out and for benchmarks.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const args = process.argv.slice(2);
  const opt = (name, def) => {
    const i = args.indexOf(`--${name}`);
    if (i < 0) return def;
    const v = args[i + 1];
    args.splice(i, 2);
    return Number(v);
  };
  const concurrency = opt("concurrency", 8);
  const pause = opt("sleep", 0);
  const lease = opt("lease", 30);
  const [pipeline, stage] = args;
  if (!pipeline || !stage) {
    console.error("usage: redrive-worker.mjs PIPELINE STAGE [--concurrency N] [--sleep SECONDS] [--lease SECONDS]");
    process.exit(2);
  }
  const counts = await work(pipeline, stage, async (job) => {
    if (pause) await sleep(pause * 1000);
    return job.input;
  }, { concurrency, lease });
  console.log(JSON.stringify(counts));
}
