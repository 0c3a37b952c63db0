package web_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
)

func loadSpec(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	if doc["openapi"] != "3.1.0" {
		t.Fatalf("openapi = %v, want 3.1.0", doc["openapi"])
	}
	return doc
}

func specOperations(doc map[string]any) map[string]map[string]any {
	ops := map[string]map[string]any{}
	for path, item := range doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			ops[strings.ToUpper(method)+" "+path] = op.(map[string]any)
		}
	}
	return ops
}

// TestOpenAPIRoutes checks that the description and the server have the
// same endpoints.
func TestOpenAPIRoutes(t *testing.T) {
	ops := specOperations(loadSpec(t))
	served := web.RoutePatterns()
	for _, p := range served {
		if _, ok := ops[p]; !ok {
			t.Errorf("the server serves %s, docs/openapi.yaml does not describe it", p)
		}
	}
	for p := range ops {
		if !slices.Contains(served, p) {
			t.Errorf("docs/openapi.yaml describes %s, the server does not serve it", p)
		}
	}
}

// TestOpenAPIResponses makes a request to every operation (and the common
// errors) against a real store and checks that each status is described
// and each body validates against its schema.
func TestOpenAPIResponses(t *testing.T) {
	doc := loadSpec(t)
	ops := specOperations(doc)
	opts := scopedOptions()
	opts.Metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintln(w, "redrive_up 1")
	})
	f := newFixture(t, opts)
	ctx := context.Background()
	succeeded, err := f.store.ListItems(ctx, redrive.ItemFilter{RunID: f.docsRun, States: []redrive.State{redrive.StateSucceeded}, Limit: 1})
	if err != nil || len(succeeded) != 1 {
		t.Fatalf("no succeeded item: %v", err)
	}
	pending := f.submit(t, http.StatusCreated, "/api/v1/runs", `{"pipeline":"docs","name":"to-cancel","items":[{"input":1}]}`).Items[0].ID

	type req struct {
		op, target, tok, body string
		header                []string
		code                  int
	}
	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	reqs := []req{
		{"GET /healthz", "/healthz", "", "", nil, 200},
		{"GET /readyz", "/readyz", "", "", nil, 200},
		{"GET /metrics", "/metrics", "", "", nil, 200},
		{"GET /api/v1/pipelines", "/api/v1/pipelines", readToken, "", nil, 200},
		{"GET /api/v1/errors", "/api/v1/errors", readToken, "", nil, 200},
		{"GET /api/v1/errors", "/api/v1/errors?stage=nope", readToken, "", nil, 400},
		{"GET /api/v1/count", "/api/v1/count?state=dead", readToken, "", nil, 200},
		{"GET /api/v1/count", "/api/v1/count?run=999", readToken, "", nil, 404},
		{"GET /api/v1/audit", "/api/v1/audit", readToken, "", nil, 200},
		{"GET /api/v1/whoami", "/api/v1/whoami", "", "", nil, 200},
		{"GET /api/v1/whoami", "/api/v1/whoami", readToken, "", nil, 200},
		{"GET /api/v1/whoami", "/api/v1/whoami", "not-a-token-of-this-server", "", nil, 401},
		{"GET /api/v1/items", "/api/v1/items?action=999", readToken, "", nil, 400},
		{"GET /api/v1/audit", "/api/v1/audit?cursor=x", readToken, "", nil, 400},
		{"POST /api/v1/runs", "/api/v1/runs", submitToken, `{"pipeline":"docs","items":[{"key":"o1","input":{"a":1},"priority":2,"order_at":"2026-01-01T00:00:00Z","callback":"https://app.example/hook"}]}`, []string{"Idempotency-Key", "spec-1"}, 201},
		{"POST /api/v1/runs", "/api/v1/runs", submitToken, `{"pipeline":"docs","items":[{"key":"o1","input":{"a":1},"priority":2,"order_at":"2026-01-01T00:00:00Z","callback":"https://app.example/hook"}]}`, []string{"Idempotency-Key", "spec-1"}, 200},
		{"POST /api/v1/runs", "/api/v1/runs", submitToken, `{"pipeline":"docs","items":[{"key":"o1","input":{"a":2}}]}`, []string{"Idempotency-Key", "spec-1"}, 422},
		{"POST /api/v1/runs", "/api/v1/runs", submitToken, `{"pipeline":"docs","items":[{"key":"o1"}]}`, nil, 400},
		{"POST /api/v1/runs", "/api/v1/runs", readToken, `{"pipeline":"docs","items":[]}`, nil, 403},
		{"POST /api/v1/runs", "/api/v1/runs", "", `{"pipeline":"docs","items":[]}`, nil, 401},
		{"POST /api/v1/runs", "/api/v1/runs", submitToken, `{"pipeline":"nope","items":[]}`, nil, 404},
		{"POST /api/v1/pipelines/{name}/items", "/api/v1/pipelines/mail/items", submitToken, `{"run":"api","items":[{"input":"x"}]}`, nil, 201},
		{"POST /api/v1/pipelines/{name}/items", "/api/v1/pipelines/mail/items", submitToken, `{"run":"api","items":[]}`, nil, 200},
		{"POST /api/v1/runs/{id}/items", "/api/v1/runs/" + id(f.docsRun) + "/items", submitToken, `{"items":[{"input":[1,2,3]}]}`, nil, 200},
		{"GET /api/v1/runs", "/api/v1/runs?limit=1", readToken, "", nil, 200},
		{"GET /api/v1/runs", "/api/v1/runs?bogus=1", readToken, "", nil, 400},
		{"GET /api/v1/runs/{id}", "/api/v1/runs/" + id(f.docsRun), readToken, "", nil, 200},
		{"GET /api/v1/runs/{id}", "/api/v1/runs/99999", readToken, "", nil, 404},
		{"GET /api/v1/items", "/api/v1/items?limit=2", readToken, "", nil, 200},
		{"GET /api/v1/items", "/api/v1/items?run=" + id(f.docsRun) + "&state=succeeded&include=output,payload,input&limit=3", readToken, "", nil, 200},
		{"GET /api/v1/items", "/api/v1/items?include=outputs", readToken, "", nil, 400},
		{"GET /api/v1/runs/{id}/items.ndjson", "/api/v1/runs/" + id(f.docsRun) + "/items.ndjson?include=input", readToken, "", nil, 200},
		{"GET /api/v1/runs/{id}/items.ndjson", "/api/v1/runs/" + id(f.docsRun) + "/items.ndjson?state=dead,canceled&limit=3", readToken, "", nil, 200},
		{"GET /api/v1/runs/{id}/items.ndjson", "/api/v1/runs/99999/items.ndjson", readToken, "", nil, 404},
		{"GET /api/v1/runs/{id}/items.ndjson", "/api/v1/runs/" + id(f.docsRun) + "/items.ndjson?state=done", readToken, "", nil, 400},
		{"GET /api/v1/runs/{id}", "/api/v1/runs/" + id(f.docsRun) + "?wait=soon", readToken, "", nil, 400},
		{"GET /api/v1/items/{id}", "/api/v1/items/" + id(succeeded[0].ID), readToken, "", nil, 200},
		{"GET /api/v1/items/{id}", "/api/v1/items/" + id(pending), readToken, "", nil, 200},
		{"POST /api/v1/items/retry-now", "/api/v1/items/retry-now", adminToken, `{"run":` + id(f.docsRun) + `,"dry_run":true}`, nil, 200},
		{"POST /api/v1/items/retry-now", "/api/v1/items/retry-now", adminToken, `{"key":"nope"}`, nil, 400},
		{"POST /api/v1/items/retry-now", "/api/v1/items/retry-now", readToken, `{}`, nil, 403},
		{"POST /api/v1/items/cancel", "/api/v1/items/cancel", adminToken, `{"run":999}`, nil, 404},
		{"POST /api/v1/items/cancel", "/api/v1/items/cancel", adminToken, `{"ids":[` + id(pending) + `],"dry_run":true}`, nil, 200},
		{"POST /api/v1/items/{id}/cancel", "/api/v1/items/" + id(pending) + "/cancel", adminToken, `{"reason":"spec"}`, nil, 200},
		{"POST /api/v1/items/{id}/cancel", "/api/v1/items/" + id(pending) + "/cancel", adminToken, `{}`, nil, 409},
		{"GET /api/v1/dlq", "/api/v1/dlq?limit=3", readToken, "", nil, 200},
		{"GET /api/v1/dlq/export", "/api/v1/dlq/export?limit=3", readToken, "", nil, 200},
		{"POST /api/v1/dlq/redrive", "/api/v1/dlq/redrive", adminToken, `{"dry_run":true}`, nil, 200},
		{"POST /api/v1/dlq/purge", "/api/v1/dlq/purge", adminToken, `{"dry_run":true}`, nil, 200},
		{"GET /api/v1/stats", "/api/v1/stats", readToken, "", nil, 200},
		{"GET /api/v1/outbox", "/api/v1/outbox?state=pending,dead&limit=1", readToken, "", nil, 200},
		{"GET /api/v1/outbox", "/api/v1/outbox?event=item.exploded", readToken, "", nil, 400},
		{"POST /api/v1/outbox/redrive", "/api/v1/outbox/redrive", adminToken, `{"pipeline":"docs","dry_run":true}`, nil, 200},
		{"POST /api/v1/outbox/redrive", "/api/v1/outbox/redrive", submitToken, `{}`, nil, 403},
		{"POST /api/v1/runs/{id}/cancel", "/api/v1/runs/" + id(f.mailRun) + "/cancel", adminToken, `{}`, nil, 200},
		{"POST /api/v1/runs/{id}/cancel", "/api/v1/runs/" + id(f.mailRun) + "/cancel", adminToken, `{}`, nil, 409},
		{"GET /api/v1/timeline", "/api/v1/timeline?run=" + id(f.docsRun), readToken, "", nil, 200},
		{"GET /api/v1/timeline", "/api/v1/timeline?step=1ms", readToken, "", nil, 400},
		{"GET /api/v1/timeline", "/api/v1/timeline?run=99999", readToken, "", nil, 404},
		{"GET /api/v1/workers", "/api/v1/workers", readToken, "", nil, 200},
		{"POST /api/v1/stages/pause", "/api/v1/stages/pause", adminToken, `{"pipeline":"docs","stage":"fetch","reason":"spec"}`, nil, 200},
		{"POST /api/v1/stages/pause", "/api/v1/stages/pause", readToken, `{"pipeline":"docs","stage":"fetch"}`, nil, 403},
		{"POST /api/v1/stages/pause", "/api/v1/stages/pause", adminToken, `{"pipeline":"nope","stage":"fetch"}`, nil, 400},
		{"GET /api/v1/stages", "/api/v1/stages", readToken, "", nil, 200},
		{"POST /api/v1/stages/resume", "/api/v1/stages/resume", adminToken, `{"pipeline":"docs","stage":"fetch"}`, nil, 200},
	}
	if err := f.store.UpsertWorker(ctx, redrive.Worker{Owner: "test", Host: "h", PID: 1, Pipelines: []string{"docs"}, StartedAt: t0, LastSeen: t0, ExpiresAt: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	ok := map[string]bool{}
	for _, rq := range reqs {
		method := rq.op[:strings.IndexByte(rq.op, ' ')]
		r := f.send(t, method, rq.target, rq.tok, rq.body, rq.header...)
		name := fmt.Sprintf("%s %s", method, rq.target)
		if r.code != rq.code {
			t.Errorf("%s: %d, want %d: %s", name, r.code, rq.code, r.body)
			continue
		}
		if r.code < 300 {
			ok[rq.op] = true
		}
		op, described := ops[rq.op]
		if !described {
			t.Errorf("%s: %s is not described", name, rq.op)
			continue
		}
		resp, found := op["responses"].(map[string]any)[strconv.Itoa(r.code)].(map[string]any)
		if !found {
			t.Errorf("%s: status %d is not described for %s", name, r.code, rq.op)
			continue
		}
		if ref, isRef := resp["$ref"].(string); isRef {
			var err error
			if resp, err = resolveAny(doc, ref); err != nil {
				t.Fatal(err)
			}
		}
		ct := r.header.Get("Content-Type")
		mt := ct[:strings.IndexAny(ct+";", ";")]
		media, found := resp["content"].(map[string]any)[mt].(map[string]any)
		if !found {
			t.Errorf("%s: content type %q is not described", name, ct)
			continue
		}
		schema := media["schema"].(map[string]any)
		var bodies [][]byte
		switch mt {
		case "application/json":
			bodies = [][]byte{r.body}
		case "application/x-ndjson":
			bodies = bytes.Split(bytes.TrimSpace(r.body), []byte("\n"))
		default:
			continue
		}
		for _, b := range bodies {
			v, err := decodeJSON(b)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			for _, e := range checkSchema(doc, schema, v, "body") {
				t.Errorf("%s: %s", name, e)
			}
		}
	}
	for op := range ops {
		if strings.HasPrefix(op, "POST /api/v1/leases") {
			continue // checked by TestOpenAPILeases, against a started client
		}
		if !ok[op] {
			t.Errorf("%s: no successful request checked its response", op)
		}
	}
}

func resolveAny(doc map[string]any, ref string) (map[string]any, error) { return resolve(doc, ref) }
