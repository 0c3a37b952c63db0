#!/usr/bin/env python3
"""A test worker on clients/python/redrive_worker.py. Its handler acts on
the input: {"final": true} fails finally, {"rate": S} is rate limited with
a Retry-After of S seconds the first time, {"flaky": K} fails retryably in
its first K attempts, {"sleep": S} takes S seconds; the output is the input
with "by": "python" and the attempt, and, for {"trace": true}, the job's
traceparent. Prints the worker's counts."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "clients", "python"))
from redrive_worker import Final, RateLimited, work  # noqa: E402

limited = set()
lock = threading.Lock()


def handle(job):
    x = job.input
    if x.get("sleep"):
        time.sleep(x["sleep"])
    if x.get("final"):
        raise Final("refused: the input asks to die")
    if x.get("rate"):
        with lock:
            first = job.id not in limited
            limited.add(job.id)
        if first:
            raise RateLimited("429 from the test dependency", retry_after=x["rate"])
    if job.attempt <= x.get("flaky", 0):
        raise ConnectionError("connection reset by the test dependency")
    if x.get("trace"):
        return dict(x, by="python", attempt=job.attempt, traceparent=job.traceparent)
    return dict(x, by="python", attempt=job.attempt)


if __name__ == "__main__":
    pipeline, stage = sys.argv[1], sys.argv[2]
    concurrency = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    lease = float(sys.argv[4]) if len(sys.argv) > 4 else 30
    import json
    print(json.dumps(work(pipeline, stage, handle, concurrency=concurrency, lease=lease, grace=5)), flush=True)
