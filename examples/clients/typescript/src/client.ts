// A typed redrive API client: openapi-fetch over the `paths` types that
// openapi-typescript generates from docs/openapi.yaml (`npm run generate`
// writes src/api.d.ts). Every path, parameter, request body and response
// below is checked by tsc against that description, so a change to the API
// description that this code does not follow fails to compile.
//
//   const api = redriveClient("http://127.0.0.1:8080", process.env.REDRIVE_TOKEN);
//   const sub = await ok("submit", api.POST("/api/v1/pipelines/{name}/items", {
//     params: { path: { name: "summarize" } },
//     body: { run: "nightly", items: [{ key: "doc-1", input: { url: "..." } }] },
//   }));
//   const run = await waitForRun(api, sub.run.id, 120_000);
//   for await (const item of listItems(api, { run: run.id, include: "output" })) { ... }

import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "./api.js";

export type Schemas = components["schemas"];
export type Item = Schemas["Item"];
export type Run = Schemas["Run"];
export type ResultLine = Schemas["ResultLine"];
export type RedriveClient = Client<paths>;

/** The query of GET /api/v1/items, as the description gives it. */
export type ItemQuery = NonNullable<paths["/api/v1/items"]["get"]["parameters"]["query"]>;

/** An answer the API gave with a status other than 2xx. */
export class APIError extends Error {
  constructor(
    readonly what: string,
    readonly status: number,
    readonly error: string,
    readonly field: string,
  ) {
    super(`${what}: ${status} ${error}${field ? ` (field ${field})` : ""}`);
  }
}

/** redriveClient returns a client of the server at baseUrl, sending token as a bearer token when given. */
export function redriveClient(baseUrl: string, token?: string): RedriveClient {
  const headers: Record<string, string> = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  return createClient<paths>({ baseUrl: baseUrl.replace(/\/+$/, ""), headers });
}

/**
 * ok awaits a request and returns its body, or throws an APIError naming
 * what was asked, the status, and the error and field the server gave.
 */
export async function ok<D>(
  what: string,
  request: Promise<{ data?: D; error?: Schemas["Error"] | unknown; response: Response }>,
): Promise<D> {
  const { data, error, response } = await request;
  if (response.ok && data !== undefined) return data;
  const e = (error ?? {}) as Partial<Schemas["Error"]>;
  throw new APIError(what, response.status, e.error ?? response.statusText, e.field ?? "");
}

/**
 * waitForRun returns the run once it leaves running, asking the server to
 * hold each request up to 30 s (GET /api/v1/runs/{id}?wait=30s) rather than
 * polling, and throws when timeoutMs passes first.
 */
export async function waitForRun(api: RedriveClient, id: number, timeoutMs: number): Promise<Schemas["RunDetail"]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const detail = await ok(
      `GET /api/v1/runs/${id}`,
      api.GET("/api/v1/runs/{id}", { params: { path: { id }, query: { wait: "30s" } } }),
    );
    if (detail.run.status !== "running") return detail;
    if (Date.now() > deadline) throw new Error(`run ${id} still running after ${timeoutMs} ms: ${JSON.stringify(detail.run.counts)}`);
  }
}

/** listItems yields the items a filter selects, page by page, following next_cursor. */
export async function* listItems(api: RedriveClient, query: Omit<ItemQuery, "cursor">): AsyncGenerator<Item[]> {
  let cursor: string | undefined;
  do {
    const page = await ok(
      "GET /api/v1/items",
      api.GET("/api/v1/items", { params: { query: cursor === undefined ? query : { ...query, cursor } } }),
    );
    yield page.data;
    cursor = page.next_cursor;
  } while (cursor);
}

/**
 * exportResults reads a run's items as JSON lines (GET
 * /api/v1/runs/{id}/items.ndjson), by default its succeeded items with
 * their outputs.
 */
export async function exportResults(api: RedriveClient, id: number, state?: string): Promise<ResultLine[]> {
  const text = await ok(
    `GET /api/v1/runs/${id}/items.ndjson`,
    api.GET("/api/v1/runs/{id}/items.ndjson", {
      params: { path: { id }, query: state === undefined ? {} : { state } },
      parseAs: "text",
    }),
  );
  return text
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line) as ResultLine);
}
