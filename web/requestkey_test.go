package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
)

// TestIdempotencyKeyReusedWithOtherBody checks that an Idempotency-Key is
// bound to the request it first came with: the same request again is a
// retry (same run and items, marked replayed), whatever its whitespace and
// field order; a request that reuses the key with other items, another run,
// pipeline or endpoint answers 422 and changes nothing, where it used to be
// answered 200 while its items were dropped.
func TestIdempotencyKeyReusedWithOtherBody(t *testing.T) {
	f := newFixture(t, scopedOptions())
	const target = "/api/v1/pipelines/docs/items"
	body := `{"run":"nightly","items":[{"input":{"doc":"a","page":1}},{"key":"b","input":"text","priority":3}]}`
	first := f.submit(t, http.StatusCreated, target, body, "Idempotency-Key", "batch-9")
	if first.Added != 2 {
		t.Fatalf("first submit = %+v", first)
	}

	// A retry, sent by a client that encodes its JSON differently.
	retry := ` { "items" : [ {"input":{"page":1, "doc":"a"}}, {"priority":3,"input":"text","key":"b"} ], "run":"nightly" } `
	r := f.send(t, "POST", target, submitToken, retry, "Idempotency-Key", "batch-9")
	if r.code != http.StatusOK {
		t.Fatalf("retry: %d %s", r.code, r.body)
	}
	var again submitted
	r.json(t, &again)
	if again.Run.ID != first.Run.ID || again.Added != 0 || again.Existing != 2 ||
		again.Items[0].ID != first.Items[0].ID || again.Items[1].ID != first.Items[1].ID {
		t.Errorf("retry = %+v, first %+v", again, first)
	}
	if r.header.Get(web.ReplayedHeader) != "true" {
		t.Errorf("retry without %s: true", web.ReplayedHeader)
	}

	before := f.snapshot(t)
	for _, tc := range []struct{ name, method, target, body string }{
		{"other input", "POST", target, `{"run":"nightly","items":[{"input":{"doc":"CHANGED","page":1}},{"key":"b","input":"text","priority":3}]}`},
		{"one more item", "POST", target, `{"run":"nightly","items":[{"input":{"doc":"a","page":1}},{"key":"b","input":"text","priority":3},{"input":3}]}`},
		{"other priority", "POST", target, `{"run":"nightly","items":[{"input":{"doc":"a","page":1}},{"key":"b","input":"text"}]}`},
		{"other run", "POST", target, `{"run":"other","items":[{"input":{"doc":"a","page":1}},{"key":"b","input":"text","priority":3}]}`},
		{"other pipeline", "POST", "/api/v1/pipelines/mail/items", body},
		{"other endpoint", "POST", "/api/v1/runs", `{"pipeline":"docs","name":"nightly","items":[{"input":{"doc":"a","page":1}},{"key":"b","input":"text","priority":3}]}`},
		{"run endpoint", "POST", fmt.Sprintf("/api/v1/runs/%d/items", first.Run.ID), `{"items":[{"input":{"doc":"a","page":1}},{"key":"b","input":"text","priority":3}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.send(t, tc.method, tc.target, submitToken, tc.body, "Idempotency-Key", "batch-9")
			msg, field := r.apiErr(t, http.StatusUnprocessableEntity)
			if field != "Idempotency-Key" || !strings.Contains(msg, `"batch-9" was used for another request`) ||
				!strings.Contains(msg, fmt.Sprintf("run %d", first.Run.ID)) {
				t.Errorf("error %q (field %q)", msg, field)
			}
			if got := f.snapshot(t); got != before {
				t.Errorf("refused request changed the store: %+v -> %+v", before, got)
			}
		})
	}

	// The key is not burnt by the refusals: the first request still replays.
	f.submit(t, http.StatusOK, target, body, "Idempotency-Key", "batch-9")
}

// TestIdempotencyKeyOfCreateRun checks the binding on POST /api/v1/runs,
// whose key also names the run: another request with the key is refused
// before a run is created for it.
func TestIdempotencyKeyOfCreateRun(t *testing.T) {
	f := newFixture(t, scopedOptions())
	body := `{"pipeline":"docs","failure_budget":0.2,"items":[{"input":1},{"input":2}]}`
	first := f.submit(t, http.StatusCreated, "/api/v1/runs", body, "Idempotency-Key", "order-5")
	f.submit(t, http.StatusOK, "/api/v1/runs", body, "Idempotency-Key", "order-5")
	before := f.snapshot(t)
	for _, other := range []string{
		`{"pipeline":"docs","failure_budget":0.3,"items":[{"input":1},{"input":2}]}`,
		`{"pipeline":"mail","failure_budget":0.2,"items":[{"input":1},{"input":2}]}`,
		`{"pipeline":"docs","failure_budget":0.2,"items":[{"input":2},{"input":1}]}`,
	} {
		msg, _ := f.send(t, "POST", "/api/v1/runs", submitToken, other, "Idempotency-Key", "order-5").apiErr(t, http.StatusUnprocessableEntity)
		if !strings.Contains(msg, fmt.Sprintf("run %d", first.Run.ID)) {
			t.Errorf("%s: %q", other, msg)
		}
	}
	if got := f.snapshot(t); got != before {
		t.Errorf("refused requests changed the store: %+v -> %+v", before, got)
	}
}

// TestSubmitOnlyExistingItems checks that a request that creates a run
// with items whose keys all exist does not leave an empty run running for
// ever: the run is finished at once as completed, the answer says which
// items the keys are and in which run, and a later item reopens the run.
func TestSubmitOnlyExistingItems(t *testing.T) {
	f := newFixture(t, scopedOptions())
	ctx := context.Background()
	// docs-000 and docs-001 are items of the fixture's docs run.
	for _, tc := range []struct{ target, body string }{
		{"/api/v1/pipelines/docs/items", `{"run":"again","items":[{"key":"docs-000","input":1},{"key":"docs-001","input":2}]}`},
		{"/api/v1/runs", `{"pipeline":"docs","name":"again-2","items":[{"key":"docs-000","input":1}]}`},
	} {
		s := f.submit(t, http.StatusCreated, tc.target, tc.body)
		if s.Added != 0 || s.Existing != len(s.Items) || !s.Created {
			t.Fatalf("%s: %+v", tc.target, s)
		}
		for _, it := range s.Items {
			if !it.Existing || it.RunID != f.docsRun {
				t.Errorf("%s: item %+v, want existing in run %d", tc.target, it, f.docsRun)
			}
		}
		if s.Run.Status != redrive.RunCompleted || s.Run.Counts.Total != 0 || !strings.Contains(s.Run.Reason, "no new items") ||
			!strings.Contains(s.Run.Reason, fmt.Sprintf("run %d", f.docsRun)) || s.Run.FinishedAt.IsZero() {
			t.Errorf("%s: answered run %+v, want it completed with the reason", tc.target, s.Run)
		}
		stored, err := f.store.GetRun(ctx, s.Run.ID)
		if err != nil || stored.Status != redrive.RunCompleted {
			t.Errorf("%s: stored run %+v, %v", tc.target, stored, err)
		}
	}

	// Submitting the same again finds the finished run and adds nothing;
	// a new item reopens it.
	s := f.submit(t, http.StatusOK, "/api/v1/pipelines/docs/items", `{"run":"again","items":[{"key":"docs-000","input":1}]}`)
	if s.Run.Status != redrive.RunCompleted {
		t.Errorf("repeat: run %+v", s.Run)
	}
	s = f.submit(t, http.StatusOK, "/api/v1/pipelines/docs/items", `{"run":"again","items":[{"key":"fresh","input":1}]}`)
	if s.Run.Status != redrive.RunRunning || s.Added != 1 || s.Items[0].RunID != s.Run.ID {
		t.Errorf("new item: %+v", s)
	}

	// An empty list creates a run to fill later: it stays running.
	s = f.submit(t, http.StatusCreated, "/api/v1/runs", `{"pipeline":"docs","name":"to-fill","items":[]}`)
	if s.Run.Status != redrive.RunRunning {
		t.Errorf("empty run: %+v", s.Run)
	}
}
