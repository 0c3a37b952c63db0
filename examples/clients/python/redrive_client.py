#!/usr/bin/env python3
"""A redrive HTTP API client in Python, standard library only.

    client = Client("http://127.0.0.1:8080", token=os.environ["REDRIVE_TOKEN"])
    res = client.submit("summarize", [{"key": "doc-1", "input": {"url": "..."}}], run="nightly")
    item = client.wait(res["items"][0]["id"])   # {"item": {...}, "output": ..., "attempts": [...]}

A submit is retried on connection errors, 429 and 5xx with the same
Idempotency-Key, so a retry never adds an item twice. See docs/api.md and
docs/openapi.yaml.

Run as a program, it submits --count demo items to --pipeline, submits the
same batch again (as a client that lost the first answer would), waits for
every item and prints a JSON summary on stdout.
"""

import argparse
import json
import os
import sys
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


# Webhook receiver: notifications of dead and succeeded items (signed with
# HMAC-SHA256) arrive with the webhook outbox, which this server version does
# not have yet. Until then, poll with Client.wait. The receiver and its
# signature check belong here.


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--token-env", default="REDRIVE_TOKEN", help="environment variable holding the bearer token")
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--run", default="python-demo")
    ap.add_argument("--count", type=int, default=10)
    args = ap.parse_args()

    client = Client(args.url, token=os.environ.get(args.token_env, ""))
    items = [{"key": f"py-{i}", "input": {"n": i, "from": "python"}} for i in range(args.count)]
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
    json.dump({
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
