// A test worker on clients/node/redrive-worker.mjs, with the handler of
// ext_worker.py: {"final": true} fails finally, {"rate": S} is rate limited
// with a Retry-After of S seconds the first time, {"flaky": K} fails
// retryably in its first K attempts, {"sleep": S} takes S seconds; the
// output is the input with "by": "node" and the attempt.
import { work, Final, RateLimited } from "../../../clients/node/redrive-worker.mjs";

const limited = new Set();
const [pipeline, stage, concurrency = "8", lease = "30"] = process.argv.slice(2);
const counts = await work(pipeline, stage, async (job) => {
  const x = job.input;
  if (x.sleep) await new Promise((r) => setTimeout(r, x.sleep * 1000));
  if (x.final) throw new Final("refused: the input asks to die");
  if (x.rate && !limited.has(job.id)) {
    limited.add(job.id);
    throw new RateLimited("429 from the test dependency", x.rate);
  }
  if (job.attempt <= (x.flaky ?? 0)) throw new Error("connection reset by the test dependency");
  return { ...x, by: "node", attempt: job.attempt };
}, { concurrency: Number(concurrency), lease: Number(lease), grace: 5 });
console.log(JSON.stringify(counts));
