// The typed client's demo: submits --count items to --pipeline (every
// --die-every-th asking to die, for a pipeline whose stage refuses those,
// such as the echo pipeline of cmd/redrive's tests), submits the same batch
// again with the same Idempotency-Key, waits for the run, lists its items
// with their outputs a page at a time, reads one succeeded and one dead item,
// exports the results as JSON lines, and prints a JSON summary on stdout.
// It checks what it can against its own inputs (an echo stage returns its
// input) and exits non-zero on the first answer it did not expect.
//
//   REDRIVE_TOKEN=... node dist/demo.js --url http://127.0.0.1:8080 --pipeline echo

import { randomUUID } from "node:crypto";
import { parseArgs, isDeepStrictEqual } from "node:util";
import { exportResults, listItems, ok, redriveClient, waitForRun, type Item } from "./client.js";

const { values: args } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8080" },
    pipeline: { type: "string", default: "echo" },
    run: { type: "string", default: "typescript-demo" },
    count: { type: "string", default: "30" },
    "die-every": { type: "string", default: "0" },
    "page-size": { type: "string", default: "7" },
    "timeout-ms": { type: "string", default: "120000" },
  },
});

function positive(name: string, v: string, zero = false): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < (zero ? 0 : 1)) throw new Error(`--${name}: want an integer ≥ ${zero ? 0 : 1}, got ${JSON.stringify(v)}`);
  return n;
}

const count = positive("count", args.count);
const dieEvery = positive("die-every", args["die-every"], true);
const pageSize = positive("page-size", args["page-size"]);
const timeoutMs = positive("timeout-ms", args["timeout-ms"]);
const dies = (i: number) => dieEvery > 0 && i % dieEvery === 0;

const api = redriveClient(args.url, process.env.REDRIVE_TOKEN);

// The inputs by key: an echo stage's output is its input.
const inputs = new Map<string, unknown>();
const items = Array.from({ length: count }, (_, i) => {
  const key = `ts-${i}`;
  const input = dies(i) ? { n: i, action: "die" } : { n: i, text: `item ${i}`, tags: ["typed", i % 2 === 0 ? "even" : "odd"] };
  inputs.set(key, input);
  return { key, input };
});

// A submit retried with the same Idempotency-Key adds nothing.
const idempotencyKey = randomUUID();
const submit = () =>
  ok(
    `POST /api/v1/pipelines/${args.pipeline}/items`,
    api.POST("/api/v1/pipelines/{name}/items", {
      params: { path: { name: args.pipeline }, header: { "Idempotency-Key": idempotencyKey } },
      body: { run: args.run, items },
    }),
  );
const first = await submit();
const again = await submit();
const runId = first.run.id;

const detail = await waitForRun(api, runId, timeoutMs);

// Every item, a page at a time, succeeded ones with their outputs.
const states: Record<string, number> = {};
const listed: Item[] = [];
let pages = 0;
let outputsMatching = 0;
for await (const page of listItems(api, { run: runId, include: "output", limit: pageSize })) {
  pages++;
  for (const item of page) {
    listed.push(item);
    states[item.state] = (states[item.state] ?? 0) + 1;
    if (item.state === "succeeded" && item.output_encoding === "json" && isDeepStrictEqual(item.output, inputs.get(item.key ?? ""))) {
      outputsMatching++;
    }
  }
}
const ids = listed.map((it) => it.id);
if (!ids.every((id, i) => i === 0 || id > (ids[i - 1] ?? 0))) throw new Error(`items not in ID order: ${ids.join(",")}`);

// One succeeded and one dead item, read alone.
const readItem = async (item: Item | undefined) => {
  if (item === undefined) return undefined;
  const d = await ok(`GET /api/v1/items/${item.id}`, api.GET("/api/v1/items/{id}", { params: { path: { id: item.id } } }));
  return {
    id: d.item.id,
    key: d.item.key ?? "",
    state: d.item.state,
    attempts: d.attempts.length,
    output_matching: d.output_encoding === "json" && isDeepStrictEqual(d.output, inputs.get(d.item.key ?? "")),
    reason_stage: d.item.reason?.stage ?? "",
    reason_error: d.item.reason?.error ?? "",
  };
};
const succeededItem = await readItem(listed.find((it) => it.state === "succeeded"));
const deadItem = await readItem(listed.find((it) => it.state === "dead"));

// The results as JSON lines.
const lines = await exportResults(api, runId);
const exportMatching = lines.filter(
  (l) => l.state === "succeeded" && l.output_encoding === "json" && isDeepStrictEqual(l.output, inputs.get(l.key ?? "")),
).length;

console.log(
  JSON.stringify({
    run_id: runId,
    run_status: detail.run.status,
    run_counts: detail.run.counts,
    added: first.added,
    created: first.created,
    existing_on_retry: again.existing,
    same_ids: isDeepStrictEqual(
      first.items.map((it) => it.id),
      again.items.map((it) => it.id),
    ),
    states,
    listed: listed.length,
    pages,
    outputs_matching: outputsMatching,
    succeeded_item: succeededItem,
    dead_item: deadItem,
    export_lines: lines.length,
    export_matching: exportMatching,
  }),
);
