#!/usr/bin/env python3
"""Measures external workers against one `redrive serve` process.

    go build -o /tmp/redrive ./cmd/redrive
    python3 examples/clients/bench_external.py --redrive /tmp/redrive \\
        --db 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable' --items 50000

It serves two pipelines from one serve process: "xbench", whose stage is
external, and "xexec", whose exec stage runs the same Python handler (it
returns its input) as a process per item, with --workers 1. It measures,
in this order, in one run:

  exec       items/s of the exec stage with one worker (--exec-items items);
  external   items/s one Python worker process (clients/python/redrive_worker.py,
             no-op handler, --concurrency threads) drains from a queue of
             --items items, from the worker's start to the run's end;
  latency    for --probes items submitted one at a time over the API (one
             every 20 ms) to an idle long-polling worker, the time from the
             submit request to the handler's start (p50, p90, p99).

and prints a JSON summary. A PostgreSQL database gets a schema of its own,
dropped at the end when psql is installed. Only loopback addresses are used.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "..", "..", "clients", "python", "redrive_worker.py")
TOKEN = "bench-token-0123456789abcdef"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class API:
    def __init__(self, url):
        self.url = url

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def submit(self, pipeline, inputs, run):
        out = None
        for i in range(0, len(inputs), 1000):
            out = self.call("POST", f"/api/v1/pipelines/{pipeline}/items",
                            {"run": run, "items": [{"input": x} for x in inputs[i:i + 1000]]})
        return out["run"]["id"]

    def watch_run(self, pipeline, run_id, poll=0.02, timeout=600):
        """Waits for a run's end, reading it from the list of the pipeline's
        runs, whose counts come from the run's count rows: the run's own
        GET adds its per-stage counts, retry histogram and top errors,
        which read the run's items (≈200 ms for 50,000 items on PostgreSQL
        here), and, asked every 20 ms, took a core from what it measured."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            rs = self.call("GET", f"/api/v1/runs?pipeline={pipeline}&limit=1")["data"]
            if not rs or rs[0]["id"] != run_id:
                return self.wait_run(run_id, poll, timeout)
            r = rs[0]
            c = r["counts"]
            if r["status"] != "running" and c["pending"] + c["running"] == 0:
                return r
            time.sleep(poll)
        raise TimeoutError(f"run {run_id} did not finish")

    def wait_run(self, run_id, poll=0.01, timeout=600):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r = self.call("GET", f"/api/v1/runs/{run_id}")["run"]
            c = r["counts"]
            if r["status"] != "running" and c["pending"] + c["running"] == 0:
                return r
            time.sleep(poll)
        raise TimeoutError(f"run {run_id} did not finish")


def process_cpu(pid):
    """The CPU seconds (user and system) process pid used so far; -1 where
    /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return -1.0


def children_cpu_seconds():
    """The CPU seconds of this process's waited-for children."""
    t = os.times()
    return t.children_user + t.children_system


def exec_stage():
    """The exec stage's handler: the same as the worker's, its input back."""
    sys.stdout.write(sys.stdin.read())


def stamp_worker(concurrency):
    """A worker whose output is the time its handler started."""
    sys.path.insert(0, os.path.dirname(WORKER))
    from redrive_worker import work
    work("xbench", "work", lambda job: {"t0": job.input["t0"], "started": time.time()}, concurrency=concurrency,
         name=f"bench-stamp:{os.getpid()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redrive", required=True, help="the redrive binary")
    ap.add_argument("--db", default="", help="database URL (default: a SQLite file in a temporary directory)")
    ap.add_argument("--items", type=int, default=50000)
    ap.add_argument("--exec-items", type=int, default=30)
    ap.add_argument("--probes", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=64, help="the external worker's threads")
    ap.add_argument("--batch", type=int, default=None, help="the external worker's lease batch (default: concurrency)")
    ap.add_argument("--worker-args", default="", help="more arguments of the worker (e.g. \"--reporters 1\")")
    ap.add_argument("--python", default=shutil.which("python3") if not os.path.exists("/usr/bin/python3") else "/usr/bin/python3")
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="redrive-bench-external-")
    with open(os.path.join(tmp, "xbench.yaml"), "w") as f:
        f.write("name: xbench\nstages:\n  - name: work\n    external: true\n")
    with open(os.path.join(tmp, "xexec.yaml"), "w") as f:
        f.write(f"name: xexec\nstages:\n  - name: work\n    exec:\n      command: {a.python}\n"
                f"      args: [{json.dumps(os.path.abspath(__file__))}, --exec-stage]\n")
    with open(os.path.join(tmp, "tokens"), "w") as f:
        f.write(f"bench work,submit,read {TOKEN}\n")
    db, schema = a.db or "sqlite:" + os.path.join(tmp, "bench.db"), f"bench_external_{os.getpid()}"
    port = free_port()
    cmd = [a.redrive, "--db", db, "--pg-schema", schema, "serve", "--migrate", "--addr", f"127.0.0.1:{port}",
           "--pipeline", os.path.join(tmp, "xbench.yaml"), "--pipeline", os.path.join(tmp, "xexec.yaml"),
           "--token-file", os.path.join(tmp, "tokens"), "--workers", "1"]
    log = open(os.path.join(tmp, "serve.log"), "w")
    serve = subprocess.Popen(cmd, stderr=log, env={k: v for k, v in os.environ.items() if not k.startswith("REDRIVE_")})
    api = API(f"http://127.0.0.1:{port}")
    procs = [serve]
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(api.url + "/readyz", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        result = {"db": db.split("://")[0].split(":")[0], "items": a.items, "concurrency": a.concurrency,
                  "python": a.python, "load_average": os.getloadavg()}

        # The exec stage, one worker: a Python process per item.
        begin = time.monotonic()
        run = api.submit("xexec", [{"n": i} for i in range(a.exec_items)], f"exec-{os.getpid()}")
        api.wait_run(run)
        result["exec_items_per_second"] = a.exec_items / (time.monotonic() - begin)

        # One Python worker process drains a full queue.
        begin = time.monotonic()
        run = api.submit("xbench", [{"n": i} for i in range(a.items)], f"drain-{os.getpid()}")
        result["submit_per_second"] = a.items / (time.monotonic() - begin)
        wcmd = [a.python, WORKER, "xbench", "work", "--concurrency", str(a.concurrency)]
        if a.batch:
            wcmd += ["--batch", str(a.batch)]
        wcmd += a.worker_args.split()
        env = dict(os.environ, REDRIVE_URL=api.url, REDRIVE_TOKEN=TOKEN)
        serve_cpu = process_cpu(serve.pid)
        children_cpu = children_cpu_seconds()
        begin = time.monotonic()
        w = subprocess.Popen(wcmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        procs.append(w)
        r = api.watch_run("xbench", run, poll=0.02)
        elapsed = time.monotonic() - begin
        serve_cpu = process_cpu(serve.pid) - serve_cpu
        w.send_signal(signal.SIGTERM)
        out, _ = w.communicate(timeout=60)
        result["external_items_per_second"] = r["counts"]["succeeded"] / elapsed
        result["external_seconds"] = elapsed
        result["external_succeeded"] = r["counts"]["succeeded"]
        result["worker_counts"] = json.loads(out.decode().strip().splitlines()[-1])
        # CPU per item: the worker's over its whole life (its start and stop
        # included), the serve process's over the drain (its own claims of
        # the exec stage, idle, included).
        result["worker_cpu_us_per_item"] = round((children_cpu_seconds() - children_cpu) / a.items * 1e6, 1)
        if serve_cpu >= 0:
            result["serve_cpu_us_per_item"] = round(serve_cpu / a.items * 1e6, 1)
        result["external_over_exec"] = result["external_items_per_second"] / result["exec_items_per_second"]

        # Submit-to-start of an idle long-polling worker.
        s = subprocess.Popen([a.python, os.path.abspath(__file__), "--stamp-worker"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(s)
        for _ in range(400):
            ws = api.call("GET", "/api/v1/workers")["data"]
            if any(x["owner"].startswith("bench-stamp:") and x["live"] for x in ws):
                break
            time.sleep(0.025)
        time.sleep(0.5)  # its first long poll is waiting
        ids = []
        for i in range(a.probes):
            t0 = time.time()
            res = api.call("POST", "/api/v1/pipelines/xbench/items", {"run": f"probe-{os.getpid()}", "items": [{"input": {"t0": t0}}]})
            ids.append(res["items"][0]["id"])
            time.sleep(0.02)
        api.wait_run(res["run"]["id"])
        lat = sorted((o["started"] - o["t0"]) * 1000 for o in
                     (api.call("GET", f"/api/v1/items/{i}")["output"] for i in ids))
        q = lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))], 2)
        result["submit_to_start_ms"] = {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": round(lat[-1], 2)}
        s.send_signal(signal.SIGTERM)
        s.wait(timeout=60)
        if a.db.startswith("postgres") and shutil.which("psql"):
            # Row versions written per item: the server's backends report
            # their counts when they end, with the serve process.
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=60)
            total = a.exec_items + a.items + a.probes
            q = (f"SELECT n_tup_upd FROM pg_stat_user_tables WHERE schemaname = '{schema}' AND relname = 'items'")
            out = subprocess.run(["psql", a.db, "-Atc", q], capture_output=True, text=True, check=False).stdout.strip()
            if out.isdigit():
                result["item_row_updates_per_item"] = round(int(out) / total, 3)
        print(json.dumps(result, indent=2))
    finally:
        for p in procs[::-1]:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        log.close()
        if a.db.startswith("postgres") and shutil.which("psql"):
            subprocess.run(["psql", a.db, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"], stderr=subprocess.DEVNULL, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--exec-stage"]:
        exec_stage()
    elif sys.argv[1:] == ["--stamp-worker"]:
        stamp_worker(4)
    else:
        main()
