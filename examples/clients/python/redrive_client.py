#!/usr/bin/env python3
"""A redrive HTTP API client in Python, standard library only.

    client = Client("http://127.0.0.1:8080", token=os.environ["REDRIVE_TOKEN"])
    res = client.submit("summarize", [{"key": "doc-1", "input": {"url": "..."}}], run="nightly")
    item = client.wait(res["items"][0]["id"])   # {"item": {...}, "output": ..., "attempts": [...]}

A submit is retried on connection errors, 429 and 5xx with the same
Idempotency-Key, so a retry never adds an item twice. See docs/api.md and
docs/openapi.yaml.

Webhooks and item callbacks are received by WebhookReceiver, which
verifies each request's Redrive-Signature (HMAC-SHA256 over the timestamp,
a '.' and the raw body, within a tolerance) and deduplicates by the
Redrive-Delivery ID, since delivery is at least once:

    rx = WebhookReceiver(os.environ["REDRIVE_CALLBACK_SECRET"].encode()).start()
    client.submit("summarize", [{"input": {...}, "callback": rx.url}])

Run as a program, it submits --count demo items to --pipeline, submits the
same batch again (as a client that lost the first answer would), waits for
every item and prints a JSON summary on stdout. With --callback-secret-env
it also receives the items' callbacks, and shows that a replayed delivery
is deduplicated and a tampered one refused.
"""

import argparse
import hashlib
import hmac
import http.server
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

FINAL_STATES = ("succeeded", "dead", "canceled")


class APIError(Exception):
    """An error answer of the API: status, message and the field at fault."""

    def __init__(self, status, message, field=""):
        super().__init__(f"{status}: {message}" + (f" (field {field})" if field else ""))
        self.status, self.message, self.field = status, message, field


class Client:
    def __init__(self, base_url, token="", timeout=30.0, attempts=5):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.attempts = attempts

    def _request(self, method, path, body=None, headers=None):
        data = None if body is None else json.dumps(body).encode()
        hdrs = {"Accept": "application/json"}
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        if self.token:
            hdrs["Authorization"] = "Bearer " + self.token
        hdrs.update(headers or {})
        delay = 0.2
        for attempt in range(1, self.attempts + 1):
            req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=hdrs)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as e:
                payload = e.read()
                try:
                    err = json.loads(payload)
                except ValueError:
                    err = {"error": payload.decode(errors="replace")}
                retryable = e.code == 429 or e.code >= 500
                if not retryable or attempt == self.attempts:
                    raise APIError(e.code, err.get("error", ""), err.get("field", "")) from None
                wait = e.headers.get("Retry-After")
                time.sleep(float(wait) if wait and wait.isdigit() else delay)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if attempt == self.attempts:
                    raise
                time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def submit(self, pipeline, items, run="", idempotency_key=None):
        """Add items to the run named run (default "default") of pipeline.

        Returns {"run", "created", "items": [{"id", "key", "existing"}], "added", "existing"}.
        """
        key = idempotency_key or str(uuid.uuid4())
        body = {"items": items}
        if run:
            body["run"] = run
        return self._request("POST", f"/api/v1/pipelines/{pipeline}/items", body, {"Idempotency-Key": key})

    def item(self, item_id):
        """Returns {"item", "output" (when succeeded with JSON), "attempts"}."""
        return self._request("GET", f"/api/v1/items/{item_id}")

    def run(self, run_id):
        return self._request("GET", f"/api/v1/runs/{run_id}")

    def wait(self, item_id, timeout=60.0, interval=0.1):
        """Polls an item until it is succeeded, dead or canceled."""
        deadline = time.monotonic() + timeout
        while True:
            d = self.item(item_id)
            if d["item"]["state"] in FINAL_STATES:
                return d
            if time.monotonic() > deadline:
                raise TimeoutError(f"item {item_id} is still {d['item']['state']}")
            time.sleep(interval)


class SignatureError(Exception):
    """A webhook request whose Redrive-Signature does not verify."""


def verify_signature(secret, header, body, now=None, tolerance=300.0):
    """Checks a Redrive-Signature header ("t=UNIX,v1=HEX[,v1=HEX]") against
    the raw body, as redrive.VerifySignature does: one v1 must be the
    HMAC-SHA256 of t + "." + body keyed with secret (compared in constant
    time), and t within tolerance seconds of now. Raises SignatureError."""
    ts, sigs = None, []
    for part in (header or "").split(","):
        k, sep, v = part.strip().partition("=")
        if not sep:
            raise SignatureError(f"malformed signature: {part!r} is not key=value")
        if k == "t":
            ts = v
        elif k == "v1":
            sigs.append(v)
    if ts is None or not ts.lstrip("-").isdigit() or not sigs:
        raise SignatureError("malformed signature: want t=UNIX,v1=HEX")
    want = hmac.new(secret, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(want, s.lower()) for s in sigs):
        raise SignatureError("signature does not match")
    now = time.time() if now is None else now
    if abs(now - int(ts)) > tolerance:
        raise SignatureError("signature timestamp outside the tolerance")


class WebhookReceiver:
    """An HTTP server on loopback that receives redrive webhooks and item
    callbacks: it verifies every request (401 when it does not verify),
    answers 200 to each delivery ID once received, and keeps each
    notification once, by delivery ID."""

    MAX_BODY = 1 << 20

    def __init__(self, secret, host="127.0.0.1", port=0, tolerance=300.0):
        self.secret, self.tolerance = secret, tolerance
        self.deliveries = {}  # delivery ID -> parsed body
        self.duplicates = 0
        self.rejected = 0
        self.raw = []  # (headers, body) of verified requests, for the demo
        self._cond = threading.Condition()
        rx = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n > rx.MAX_BODY:
                    self.send_response(413)
                    self.end_headers()
                    return
                body = self.rfile.read(n)
                code = rx._receive(self.headers, body)
                self.send_response(code)
                self.end_headers()

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer((host, port), Handler)

    def _receive(self, headers, body):
        try:
            verify_signature(self.secret, headers.get("Redrive-Signature"), body, tolerance=self.tolerance)
        except SignatureError:
            with self._cond:
                self.rejected += 1
            return 401
        delivery = headers.get("Redrive-Delivery", "")
        with self._cond:
            if delivery in self.deliveries:
                self.duplicates += 1
            else:
                self.deliveries[delivery] = json.loads(body)
                self.raw.append(({k: v for k, v in headers.items()}, body))
            self._cond.notify_all()
        return 200

    @property
    def url(self):
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/redrive"

    def start(self):
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def wait(self, n, timeout=60.0):
        """Waits until n distinct notifications arrived; returns them."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.deliveries) >= n, timeout):
                raise TimeoutError(f"{len(self.deliveries)} of {n} notifications arrived")
            return list(self.deliveries.values())

    def close(self):
        self._server.shutdown()
        self._server.server_close()


def post_raw(url, headers, body):
    """POSTs a body with headers as given; returns the status code."""
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--token-env", default="REDRIVE_TOKEN", help="environment variable holding the bearer token")
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--run", default="python-demo")
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--die-every", type=int, default=0, help='mark every Nth item (0, N, 2N...) with "die": true')
    ap.add_argument("--callback-secret-env", default="", help="environment variable holding the callback secret: receive callbacks")
    args = ap.parse_args()

    client = Client(args.url, token=os.environ.get(args.token_env, ""))
    items = [{"key": f"py-{i}", "input": {"n": i, "from": "python"}} for i in range(args.count)]
    for i, it in enumerate(items):
        if args.die_every and i % args.die_every == 0:
            it["input"]["die"] = True
    rx = None
    if args.callback_secret_env:
        rx = WebhookReceiver(os.environ[args.callback_secret_env].encode()).start()
        for it in items:
            it["callback"] = rx.url
    key = str(uuid.uuid4())
    first = client.submit(args.pipeline, items, run=args.run, idempotency_key=key)
    retry = client.submit(args.pipeline, items, run=args.run, idempotency_key=key)
    states, matches = {}, 0
    for sent, got in zip(items, first["items"]):
        d = client.wait(got["id"])
        states[d["item"]["state"]] = states.get(d["item"]["state"], 0) + 1
        if d.get("output") == sent["input"]:
            matches += 1
    try:
        client.submit("no-such-pipeline", items[:1])
        unknown = None
    except APIError as e:
        unknown = {"status": e.status, "field": e.field}
    webhooks = None
    if rx is not None:
        got = rx.wait(states.get("dead", 0))
        headers, body = rx.raw[0]
        sent = {k: v for k, v in headers.items() if k.lower().startswith("redrive-") or k.lower() == "content-type"}
        replay = post_raw(rx.url, sent, body)  # a redelivery: accepted, kept once
        tampered = post_raw(rx.url, sent, body.replace(b'"item.dead"', b'"item.succeeded"'))
        webhooks = {
            "received": len(rx.deliveries),
            "events": sorted({n["event"] for n in got}),
            "dead_keys": sorted(n["item"]["key"] for n in rx.deliveries.values()),
            "duplicates": rx.duplicates,
            "rejected": rx.rejected,
            "replay_status": replay,
            "tampered_status": tampered,
        }
        rx.close()
    json.dump({
        "webhooks": webhooks,
        "run_id": first["run"]["id"],
        "added": first["added"],
        "existing_on_retry": retry["existing"],
        "same_ids": [i["id"] for i in first["items"]] == [i["id"] for i in retry["items"]],
        "states": states,
        "outputs_matching": matches,
        "unknown_pipeline": unknown,
    }, sys.stdout)
    print()


if __name__ == "__main__":
    main()
