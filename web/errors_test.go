package web_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/redrive/redrive"
)

// goInternals matches what a client should never read in an error: Go
// type and field names, and the package prefixes of error chains.
var goInternals = regexp.MustCompile(`RunOptions|json\.|\[\]|int64|float64|redrive\.|redrive: |sqlite: |postgres: |runner: |bad filter`)

// TestErrorsNameTheRequestField checks that the errors of the submit, item,
// run and dead-letter endpoints name the request's field and JSON types,
// never Go's (they used to say RunOptions.FailureBudget, []json.RawMessage,
// int64 or "invalid JSON body: json: cannot unmarshal ... into Go value").
func TestErrorsNameTheRequestField(t *testing.T) {
	f := newFixture(t, scopedOptions())
	cases := []struct {
		name, method, target, tok, body string
		code                            int
		field, says                     string
	}{
		{"failure budget", "POST", "/api/v1/runs", submitToken, `{"pipeline":"docs","failure_budget":2,"items":[]}`, 400, "failure_budget", "must be between 0 and 1"},
		{"threshold type", "POST", "/api/v1/runs", submitToken, `{"pipeline":"docs","success_threshold":"high","items":[]}`, 400, "success_threshold", "must be a JSON number, got a JSON string"},
		{"partial over success", "POST", "/api/v1/runs", submitToken, `{"pipeline":"docs","success_threshold":0.5,"partial_threshold":0.9,"items":[]}`, 400, "partial_threshold", "must not exceed success_threshold 0.5"},
		{"partial over default", "POST", "/api/v1/runs", submitToken, `{"pipeline":"docs","partial_threshold":0.99,"items":[]}`, 400, "partial_threshold", "0.95 (the default)"},
		{"min items", "POST", "/api/v1/runs", submitToken, `{"pipeline":"docs","min_items":-1,"items":[]}`, 400, "min_items", "must not be negative"},
		{"items an object", "POST", "/api/v1/runs", submitToken, `{"pipeline":"docs","items":{"input":1}}`, 400, "items", "must be a JSON array, got a JSON object"},
		{"input not JSON", "POST", "/api/v1/pipelines/docs/items", submitToken, `{"items":[{"input":1},{"input":1},{"input":1},{"input":tru}]}`, 400, "items[3].input", "not valid JSON"},
		{"key not JSON", "POST", "/api/v1/pipelines/docs/items", submitToken, `{"items":[{"input":1,"key":"a}]}`, 400, "", "invalid JSON body"},
		{"body an array", "POST", "/api/v1/runs", submitToken, `[{"pipeline":"docs"}]`, 400, "", "must be a JSON object, got a JSON array"},
		{"run of pipeline items", "POST", "/api/v1/pipelines/docs/items", submitToken, `{"run":7,"items":[]}`, 400, "run", "must be a JSON string, got a JSON number"},
		{"redrive run type", "POST", "/api/v1/dlq/redrive", adminToken, `{"run":"7"}`, 400, "run", "must be a JSON integer, got a JSON string"},
		{"redrive states type", "POST", "/api/v1/dlq/redrive", adminToken, `{"states":"dead"}`, 400, "states", "must be a JSON array, got a JSON string"},
		{"purge dry_run type", "POST", "/api/v1/dlq/purge", adminToken, `{"dry_run":"yes"}`, 400, "dry_run", "must be a JSON boolean, got a JSON string"},
		{"cancel reason type", "POST", fmt.Sprintf("/api/v1/runs/%d/cancel", f.mailRun), adminToken, `{"reason":5}`, 400, "reason", "must be a JSON string, got a JSON number"},
		{"cancel items ids", "POST", "/api/v1/items/cancel", adminToken, `{"ids":[1,"2"]}`, 400, "ids", "must be a JSON integer"},
		{"export until before since", "GET", "/api/v1/dlq/export?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", readToken, "", 400, "until", "is before since"},
		{"unknown pipeline", "POST", "/api/v1/runs", submitToken, `{"pipeline":"nope","items":[]}`, 404, "pipeline", `unknown pipeline "nope"`},
		{"unknown pipeline in path", "POST", "/api/v1/pipelines/nope/items", submitToken, `{"items":[]}`, 404, "name", `unknown pipeline "nope"`},
		{"missing run", "GET", "/api/v1/runs/9999", readToken, "", 404, "", "run 9999 does not exist"},
		{"items of a missing run", "POST", "/api/v1/runs/9999/items", submitToken, `{"items":[{"input":1}]}`, 404, "", "run 9999 does not exist"},
		{"missing item", "GET", "/api/v1/items/9999", readToken, "", 404, "", "item 9999 does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := f.snapshot(t)
			msg, field := f.send(t, tc.method, tc.target, tc.tok, tc.body).apiErr(t, tc.code)
			if field != tc.field || !strings.Contains(msg, tc.says) {
				t.Errorf("error %q (field %q), want field %q and %q", msg, field, tc.field, tc.says)
			}
			if m := goInternals.FindString(msg); m != "" {
				t.Errorf("error %q names Go's %q", msg, m)
			}
			if got := f.snapshot(t); got != before {
				t.Errorf("refused request changed the store: %+v -> %+v", before, got)
			}
		})
	}
}

// TestKeyFilterTakesTheInputID checks that the API's key filter accepts
// the id of an input line that redrive run or enqueue stored as
// "<run>/<id>", as the key the user gave, on the item list and on the
// dead-letter actions; an id in two runs is refused, naming them.
func TestKeyFilterTakesTheInputID(t *testing.T) {
	f := newFixture(t, scopedOptions())
	ctx := context.Background()
	mk := func() (redrive.Run, int64) {
		run, _, err := f.store.CreateRun(ctx, "mail", redrive.RunOptions{}, t0)
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.store.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "mail", Stage: "fetch", Now: t0,
			Items: []redrive.NewItem{{Key: redrive.ScopedKey(run.ID, "doc-7"), Invalid: "line 1: not JSON"}}})
		if err != nil {
			t.Fatal(err)
		}
		return run, res[0].ID
	}
	run1, id1 := mk()

	list := func(target string) page {
		t.Helper()
		r := f.send(t, "GET", target, readToken, "")
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", target, r.code, r.body)
		}
		var p page
		r.json(t, &p)
		return p
	}
	p := list("/api/v1/items?key=doc-7")
	if len(p.Data) != 1 || p.Data[0].ID != id1 {
		t.Fatalf("items?key=doc-7 = %+v, want item %d", p.Data, id1)
	}
	r := f.send(t, "POST", "/api/v1/dlq/redrive", adminToken, `{"key":"doc-7","dry_run":true}`)
	if r.code != http.StatusOK || !strings.Contains(string(r.body), `"count":1`) {
		t.Errorf("redrive key doc-7: %d %s", r.code, r.body)
	}

	run2, id2 := mk()
	msg, field := f.send(t, "GET", "/api/v1/items?key=doc-7", readToken, "").apiErr(t, http.StatusBadRequest)
	if field != "key" || !strings.Contains(msg, fmt.Sprintf("run %d", run1.ID)) || !strings.Contains(msg, fmt.Sprintf("run %d", run2.ID)) {
		t.Errorf("ambiguous key: %q (field %q)", msg, field)
	}
	p = list(fmt.Sprintf("/api/v1/items?key=doc-7&run=%d", run2.ID))
	if len(p.Data) != 1 || p.Data[0].ID != id2 {
		t.Errorf("items?key=doc-7&run=%d = %+v, want item %d", run2.ID, p.Data, id2)
	}
}
