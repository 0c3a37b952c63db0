#!/usr/bin/env python3
"""A redrive worker in Python, standard library only (Python 3.8+).

It works an external stage of a pipeline served by `redrive serve`: it
leases the stage's items over HTTP, runs your handler on each in a pool of
threads, heartbeats the leases while handlers run, and reports every
result, in batches. redrive applies the stage's retry policy, rate limit,
breaker and failure budget to those results as to a Go handler's.

    from redrive_worker import work, Final, RateLimited

    def embed(job):                     # job.input is the item's JSON input
        if "text" not in job.input:
            raise Final("no text")      # dead at once, with this reason
        try:
            return {"vector": model.embed(job.input["text"])}  # the output
        except QuotaExceeded as e:
            raise RateLimited(str(e), retry_after=30)   # the stage waits
        # any other exception is retryable: the policy's backoff applies

    work("docs", "embed", embed, concurrency=8)   # until SIGTERM or SIGINT

The server's URL and a token with the work scope come from the arguments
url= and token=, or the environment variables REDRIVE_URL (default
http://127.0.0.1:8080) and REDRIVE_TOKEN. On SIGTERM or SIGINT the worker
stops leasing, lets running handlers finish for up to `grace` seconds,
reports their results and gives back (releases) what it could not finish,
so nothing waits for a lease to expire. The protocol is in docs/workers.md.
"""

import base64
import http.client
import json
import logging
import os
import queue
import random
import signal
import socket
import sys
import threading
import time
import urllib.parse

__all__ = ["work", "Worker", "Job", "Final", "RateLimited", "Retryable", "APIError"]

log = logging.getLogger("redrive_worker")


class Final(Exception):
    """A failure that no retry can fix: the item is dead at once, with the
    message as its reason."""


class RateLimited(Exception):
    """The dependency asked to slow down: the item (and the stage) waits
    retry_after seconds (None: the policy's rate-limit backoff), without
    using up an attempt."""

    def __init__(self, message="rate limited", retry_after=None):
        super().__init__(message)
        self.retry_after = retry_after


class Retryable(Exception):
    """A failure worth retrying after the policy's backoff. Any exception
    that is not Final or RateLimited is retryable too."""


class APIError(Exception):
    """An answer of the server that the worker cannot go on with."""

    def __init__(self, status, message, field=""):
        super().__init__(f"{status}: {message}" + (f" (field {field})" if field else ""))
        self.status, self.message, self.field = status, message, field


class Job:
    """One leased item. input is the stage's input (parsed JSON, or bytes
    when it is not JSON); a handler returns the output: a JSON value, or
    bytes (sent as base64); attempt counts from 1; deadline is the
    time.monotonic() by which the stage's timeout ends (None: no timeout).
    traceparent and tracestate are the W3C Trace Context of the attempt
    ("" when the item has none): send them as headers, or give them to an
    OpenTelemetry propagator, to make your spans children of the attempt's
    (docs/tracing.md); trace_headers() returns them as a dict of headers."""

    __slots__ = ("id", "token", "key", "run", "pipeline", "stage", "attempt", "input", "timeout",
                 "deadline", "started", "done", "lost", "traceparent", "tracestate")

    def __init__(self, d):
        self.id = d["id"]
        self.token = d["token"]
        self.key = d.get("key", "")
        self.run = d.get("run")
        self.pipeline = d.get("pipeline")
        self.stage = d.get("stage")
        self.attempt = d.get("attempt", 1)
        if d.get("input_encoding") == "base64":
            self.input = base64.b64decode(d["input"])
        else:
            self.input = d.get("input")
        self.timeout = d.get("timeout") or None
        self.traceparent = d.get("traceparent", "")
        self.tracestate = d.get("tracestate", "")
        self.started = time.monotonic()
        self.deadline = self.started + self.timeout if self.timeout else None
        self.done = False   # its result was handed to the reporter (or given up)
        self.lost = False   # the server said its lease is gone

    def ref(self):
        return {"id": self.id, "token": self.token}

    def trace_headers(self):
        """The attempt's traceparent and tracestate as HTTP headers (empty
        when the item has no trace context)."""
        h = {}
        if self.traceparent:
            h["traceparent"] = self.traceparent
            if self.tracestate:
                h["tracestate"] = self.tracestate
        return h

    def __repr__(self):
        return f"Job(id={self.id}, stage={self.stage!r}, attempt={self.attempt})"


class _Conn:
    """A keep-alive HTTP connection to the server, reopened on failure."""

    def __init__(self, url, token, timeout):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"url {url!r}: want http://host:port or https://host:port")
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port
        self.prefix = u.path.rstrip("/")
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            self.headers["Authorization"] = "Bearer " + token
        self.timeout = timeout
        self.conn = None

    def _open(self, timeout):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        self.conn = cls(self.host, self.port, timeout=timeout)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def post(self, path, body, timeout=None):
        """POST body as JSON; returns (status, decoded JSON body)."""
        data = json.dumps(body, separators=(",", ":")).encode()
        timeout = timeout or self.timeout
        for again in (True, False):
            try:
                if self.conn is None:
                    self._open(timeout)
                else:
                    self.conn.sock.settimeout(timeout)
                self.conn.request("POST", self.prefix + path, data, self.headers)
                resp = self.conn.getresponse()
                raw = resp.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, http.client.CannotSendRequest):
                # A keep-alive connection the server closed: once more on a
                # new one (the request was not read, or is safe to repeat).
                self.close()
                if not again:
                    raise
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {"error": raw[:200].decode("utf-8", "replace")}
        return resp.status, doc

    def abort(self):
        """Ends a request under way from another thread (a long poll)."""
        c = self.conn
        if c is not None and c.sock is not None:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        self.conn = None


def _check(status, doc, ok=(200,)):
    if status not in ok:
        raise APIError(status, doc.get("error", ""), doc.get("field", ""))
    return doc


class Worker:
    """Works one external stage until stop() (or SIGTERM/SIGINT in run()).

    concurrency  handlers running at once (threads); the worker leases only
                 as many items as it has free threads.
    batch        most items per lease request (default: concurrency, at
                 most 1000).
    wait         seconds a lease request waits for a due item (long poll,
                 at most 30).
    lease        seconds a lease lasts without a heartbeat (default 30):
                 a worker that dies loses its items after this long;
                 heartbeats go every third of it.
    grace        seconds running handlers get to finish on stop; then their
                 items are released.
    name         the worker's name in leases and `redrive workers` (default
                 python:HOST:PID).
    leasers      lease requests in flight at once (default 2), each for
                 free threads only.
    reporters    batches of results in flight at once (default 2).
    """

    def __init__(self, pipeline, stage, handler, concurrency=8, url=None, token=None, batch=None,
                 wait=30.0, lease=30.0, grace=25.0, name=None, timeout=60.0, leasers=2, reporters=2):
        self.pipeline, self.stage, self.handler = pipeline, stage, handler
        self.concurrency = max(1, int(concurrency))
        self.batch = max(1, min(int(batch or self.concurrency), 1000))
        self.wait = max(0.0, min(float(wait), 30.0))
        self.lease = max(1.0, float(lease))
        self.reporters = max(1, int(reporters))
        self.grace = grace
        self.url = url or os.environ.get("REDRIVE_URL", "http://127.0.0.1:8080")
        self.token = token if token is not None else os.environ.get("REDRIVE_TOKEN", "")
        self.name = name or f"python:{socket.gethostname()}:{os.getpid()}"
        self.timeout = timeout
        self.jobs = {}                     # (id, token) -> Job: leased, result not yet reported
        self.lock = threading.Lock()
        self.free = threading.Condition(self.lock)
        self.busy = 0                      # handlers running or queued
        self.todo = queue.SimpleQueue()    # jobs for the handler threads
        self.results = queue.SimpleQueue()  # (job, result-dict, kind) for the reporter
        self.stopping = threading.Event()
        self.error = None                  # a fatal APIError, raised by run()
        self.counts = {"leased": 0, "completed": 0, "failed": 0, "refused": 0, "released": 0}
        # Two lease requests in flight: one is answered while the other's
        # items are being worked and reported.
        self._leasers = [_Conn(self.url, self.token, timeout) for _ in range(max(1, int(leasers)))]
        self._threads = []

    # -- lifecycle ---------------------------------------------------------

    def start(self):
        for i in range(self.concurrency):
            self._spawn(self._handle_loop, f"handler-{i}")
        # Two reporters: one batch of results is recorded while the next
        # one is sent, as the engine's own completers do.
        for i in range(self.reporters):
            self._spawn(self._report_loop, f"reporter-{i}")
        self._spawn(self._heartbeat_loop, "heartbeat")
        for i, conn in enumerate(self._leasers):
            self._spawn(lambda c=conn: self._lease_loop(c), f"leaser-{i}")
        return self

    def _spawn(self, fn, name):
        t = threading.Thread(target=fn, name=f"redrive-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self):
        """Asks the worker to stop: no more leases; run() finishes up."""
        if not self.stopping.is_set():
            self.stopping.set()
            for c in self._leasers:
                c.abort()
            with self.lock:
                self.free.notify_all()

    def run(self):
        """Starts the worker and blocks until it stopped; SIGTERM and SIGINT
        stop it gracefully (in the main thread). Raises the APIError that
        stopped it, if one did."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        self.start()
        while not self.stopping.wait(0.5):
            pass
        self._finish()
        if self.error is not None:
            raise self.error
        return self.counts

    def _finish(self):
        deadline = time.monotonic() + self.grace
        # Items still queued never started: give them back at once.
        queued = []
        while True:
            try:
                queued.append(self.todo.get_nowait())
            except queue.Empty:
                break
        with self.lock:
            for j in queued:
                self.jobs.pop((j.id, j.token), None)
                self.busy -= 1
        self._release([j.ref() for j in queued])
        with self.lock:
            while self.busy > 0 and time.monotonic() < deadline:
                self.free.wait(0.1)
        for _ in range(self.concurrency):
            self.todo.put(None)  # handler threads end
        for _ in range(self.reporters):
            self.results.put(None)   # the reporters send what is left, then end
        for t in self._threads:
            if t.name.startswith("redrive-reporter"):
                t.join(max(1.0, deadline - time.monotonic() + 5))
        with self.lock:
            left = [j.ref() for j in self.jobs.values() if not j.done]
            self.jobs.clear()
        self._release(left, leaving=True)

    def _release(self, refs, leaving=False):
        if not refs and not leaving:
            return
        conn = _Conn(self.url, self.token, self.timeout)
        try:
            for i in range(0, max(len(refs), 1), 1000):
                _check(*conn.post("/api/v1/leases/release", {"worker": self.name, "leases": refs[i:i + 1000],
                                                              "leaving": leaving and i + 1000 >= len(refs)}))
            self.counts["released"] += len(refs)
        except (OSError, APIError, http.client.HTTPException) as e:
            log.warning("redrive worker: releasing %d leases failed (they return when they expire): %s", len(refs), e)
        finally:
            conn.close()

    def _fatal(self, err):
        log.error("redrive worker: %s", err)
        if self.error is None:
            self.error = err
        self.stop()

    # -- leasing -----------------------------------------------------------

    def _lease_loop(self, conn):
        failures = 0
        while not self.stopping.is_set():
            with self.lock:
                # Lease only what free threads start at once: when a thread
                # idles, or half a batch is free, so that leases go in
                # batches under load. The slots asked for are reserved, so
                # that two leasers never ask for the same thread.
                while not self.stopping.is_set():
                    free = self.concurrency - self.busy
                    if free > 0 and (self.todo.qsize() == 0 or free >= self.batch / 2):
                        break
                    self.free.wait(1.0)
                if self.stopping.is_set():
                    return
                want = min(self.concurrency - self.busy, self.batch)
                self.busy += want
            body = {"pipeline": self.pipeline, "stage": self.stage, "worker": self.name, "host": socket.gethostname(),
                    "pid": os.getpid(), "max": want, "wait": self.wait, "lease": self.lease}
            try:
                status, doc = conn.post("/api/v1/leases", body, timeout=self.wait + self.timeout)
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                with self.lock:
                    self.busy -= want
                    self.free.notify_all()
                if self.stopping.is_set():
                    return
                failures += 1
                d = min(5.0, 0.05 * 2 ** failures) * random.uniform(0.5, 1.0)
                log.warning("redrive worker: lease failed: %s; again in %.1fs", e, d)
                self.stopping.wait(d)
                continue
            if status != 200:
                with self.lock:
                    self.busy -= want
                    self.free.notify_all()
            if status in (429, 502, 503, 504) or status >= 500:
                failures += 1
                self.stopping.wait(min(5.0, 0.05 * 2 ** failures) * random.uniform(0.5, 1.0))
                continue
            if status != 200:
                self._fatal(APIError(status, doc.get("error", ""), doc.get("field", "")))
                return
            failures = 0
            jobs = [Job(d) for d in doc.get("leases", [])]
            with self.lock:
                for j in jobs:
                    self.jobs[(j.id, j.token)] = j
                self.busy -= want - len(jobs)
                self.free.notify_all()
                self.counts["leased"] += len(jobs)
            for j in jobs:
                self.todo.put(j)

    # -- handlers ----------------------------------------------------------

    def _handle_loop(self):
        while True:
            j = self.todo.get()
            if j is None:
                return
            try:
                out = self.handler(j)
                try:
                    if isinstance(out, (bytes, bytearray)):
                        res = ("complete", {"id": j.id, "token": j.token, "output": base64.b64encode(out).decode(),
                                            "output_encoding": "base64"})
                    else:
                        res = ("complete", {"id": j.id, "token": j.token, "output": out})
                        json.dumps(out)
                except (TypeError, ValueError) as e:
                    res = ("fail", self._failure(j, "final", f"the handler's output is not JSON: {e}"))
            except Final as e:
                res = ("fail", self._failure(j, "final", _message(e)))
            except RateLimited as e:
                f = self._failure(j, "rate_limited", _message(e))
                if e.retry_after is not None:
                    f["retry_after"] = max(0.0, float(e.retry_after))
                res = ("fail", f)
            except Exception as e:  # anything else is retryable
                res = ("fail", self._failure(j, "retryable", _message(e)))
            with self.lock:
                self.busy -= 1
                self.free.notify_all()
                skip = j.done or j.lost
                j.done = True
            if skip:
                if j.lost:
                    log.warning("redrive worker: item %d finished after its lease was lost; its result is dropped", j.id)
                with self.lock:
                    self.jobs.pop((j.id, j.token), None)
                continue
            self.results.put((j, res))

    @staticmethod
    def _failure(j, cls, msg):
        return {"id": j.id, "token": j.token, "class": cls, "error": msg}

    # -- reporting ---------------------------------------------------------

    def _report_loop(self):
        conn = _Conn(self.url, self.token, self.timeout)
        ending = False
        while not ending:
            first = self.results.get()
            batch = [] if first is None else [first]
            ending = first is None
            while len(batch) < 1000:
                try:
                    r = self.results.get_nowait()
                except queue.Empty:
                    break
                if r is None:
                    ending = True
                    break
                batch.append(r)
            done = [r for r in batch if r[1][0] == "complete"]
            failed = [r for r in batch if r[1][0] == "fail"]
            if done:
                self._report(conn, "/api/v1/leases/complete", "results", done, "completed")
            if failed:
                self._report(conn, "/api/v1/leases/fail", "failures", failed, "failed")
        conn.close()

    def _report(self, conn, path, key, batch, counter):
        body = {"worker": self.name, key: [r[1][1] for r in batch]}
        jobs = [r[0] for r in batch]
        until = min(j.started for j in jobs) + 3600
        failures = 0
        while True:
            try:
                status, doc = conn.post(path, body)
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                status, doc = 0, {"error": str(e)}
            if status in (200, 409):
                refused = [r for r in doc.get("results", []) if not r.get("applied")]
                with self.lock:
                    self.counts[counter] += len(jobs) - len(refused)
                    self.counts["refused"] += len(refused)
                if refused:
                    # A result whose lease expired or was superseded; after
                    # a retried request, one that the lost answer applied.
                    log.warning("redrive worker: %d results refused: %s", len(refused), refused[0].get("error", ""))
                break
            if 400 <= status < 500 and status != 429:
                log.error("redrive worker: reporting %d results failed: %s %s", len(jobs), status, doc.get("error"))
                break
            failures += 1
            if time.monotonic() > until or failures > 50:
                log.error("redrive worker: giving up reporting %d results: %s", len(jobs), doc.get("error"))
                break
            time.sleep(min(5.0, 0.05 * 2 ** failures) * random.uniform(0.5, 1.0))
        with self.lock:
            for j in jobs:
                self.jobs.pop((j.id, j.token), None)

    # -- heartbeats ----------------------------------------------------------

    def _heartbeat_loop(self):
        # Every held lease is extended every third of the lease, so that
        # one lost heartbeat costs none; timeouts are checked every second.
        conn = _Conn(self.url, self.token, self.timeout)
        interval = self.lease / 3
        last = time.monotonic()
        while not self.stopping.wait(min(interval, 1.0)):
            now = time.monotonic()
            with self.lock:
                late = [j for j in self.jobs.values()
                        if not j.done and not j.lost and j.deadline is not None and now > j.deadline]
                for j in late:
                    j.done = True
            for j in late:
                # The stage's timeout passed: the attempt fails now, and the
                # handler's result, when it comes, is dropped.
                self.results.put((j, ("fail", self._failure(j, "retryable", f"handler timed out after {j.timeout:g}s"))))
            if now - last < interval:
                continue
            last = now
            with self.lock:
                held = [j for j in self.jobs.values() if not j.lost]
            for i in range(0, len(held), 1000):
                part = held[i:i + 1000]
                body = {"worker": self.name, "leases": [j.ref() for j in part], "lease": self.lease}
                try:
                    status, doc = conn.post("/api/v1/leases/heartbeat", body)
                except (OSError, http.client.HTTPException) as e:
                    conn.close()
                    log.warning("redrive worker: heartbeat failed: %s", e)
                    continue
                if status not in (200, 409):
                    log.warning("redrive worker: heartbeat: %s %s", status, doc.get("error"))
                    continue
                gone = {(r["id"]) for r in doc.get("results", []) if not r.get("applied")}
                if gone:
                    with self.lock:
                        for j in part:
                            if j.id in gone:
                                j.lost = True
                    log.warning("redrive worker: %d leases lost (expired or taken over); their results are dropped", len(gone))
        conn.close()


def _message(e):
    m = str(e)
    return f"{type(e).__name__}: {m}" if not isinstance(e, (Final, RateLimited, Retryable)) else (m or type(e).__name__)


def work(pipeline, stage, handler, concurrency=8, **options):
    """Works an external stage until SIGTERM or SIGINT; see Worker for the
    options. Returns the worker's counts."""
    return Worker(pipeline, stage, handler, concurrency=concurrency, **options).run()


def _main(argv):
    """A worker whose handler returns its input (or sleeps --sleep seconds
    first): for trying a server out, and for benchmarks."""
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pipeline")
    ap.add_argument("stage")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds each item takes")
    ap.add_argument("--lease", type=float, default=30.0)
    ap.add_argument("--name", default=None)
    ap.add_argument("--leasers", type=int, default=2)
    ap.add_argument("--reporters", type=int, default=2)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")

    def echo(job):
        if a.sleep:
            time.sleep(a.sleep)
        return job.input

    counts = work(a.pipeline, a.stage, echo, concurrency=a.concurrency, batch=a.batch, lease=a.lease, name=a.name,
                  leasers=a.leasers, reporters=a.reporters)
    print(json.dumps(counts))


if __name__ == "__main__":
    _main(sys.argv[1:])
