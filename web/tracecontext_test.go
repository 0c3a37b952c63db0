package web_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/redrive/redrive"
)

// TestSubmitStoresTraceContext shows that every submit endpoint stores the
// request's traceparent and tracestate with its items, normalised; that a
// malformed traceparent is ignored; that an Idempotency-Key replay with
// another traceparent is the same submit; and that items show their trace
// context in GET /api/v1/items/{id}.
func TestSubmitStoresTraceContext(t *testing.T) {
	f := newFixture(t, scopedOptions())
	const (
		tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		ts = "rojo=00f067aa0ba902b7"
	)
	check := func(what string, id int64, wantTP, wantTS string) {
		t.Helper()
		it, err := f.store.GetItem(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if it.TraceParent != wantTP || it.TraceState != wantTS {
			t.Errorf("%s: item %d trace context %q, %q; want %q, %q", what, id, it.TraceParent, it.TraceState, wantTP, wantTS)
		}
	}
	run := f.submit(t, http.StatusCreated, "/api/v1/runs", `{"pipeline":"docs","items":[{"input":1},{"input":2}]}`,
		"Traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", "Tracestate", ts, "Idempotency-Key", "k-1")
	for _, it := range run.Items {
		check("POST /api/v1/runs", it.ID, "", "") // upper case is not a valid traceparent: ignored
	}
	run = f.submit(t, http.StatusCreated, "/api/v1/runs", `{"pipeline":"docs","items":[{"input":1},{"input":2}]}`,
		"Traceparent", tp, "Tracestate", ts, "Idempotency-Key", "k-2")
	for _, it := range run.Items {
		check("POST /api/v1/runs", it.ID, tp, ts)
	}
	const other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	replay := f.submit(t, http.StatusOK, "/api/v1/runs", `{"pipeline":"docs","items":[{"input":1},{"input":2}]}`,
		"Traceparent", other, "Idempotency-Key", "k-2")
	if replay.Added != 0 || replay.Run.ID != run.Run.ID {
		t.Errorf("replay with another traceparent = %+v, want the same submit", replay)
	}
	check("after a replay", run.Items[0].ID, tp, ts)
	more := f.submit(t, http.StatusOK, fmt.Sprintf("/api/v1/runs/%d/items", run.Run.ID), `{"items":[{"input":3}]}`, "Traceparent", other)
	check("POST /api/v1/runs/{id}/items", more.Items[0].ID, other, "")
	byName := f.submit(t, http.StatusCreated, "/api/v1/pipelines/docs/items", `{"items":[{"input":4}]}`, "Traceparent", tp)
	check("POST /api/v1/pipelines/{name}/items", byName.Items[0].ID, tp, "")
	plain := f.submit(t, http.StatusCreated, "/api/v1/pipelines/mail/items", `{"items":[{"input":5}]}`, "Traceparent", "garbage")
	check("malformed traceparent", plain.Items[0].ID, "", "")

	var detail struct {
		Item redrive.Item `json:"item"`
	}
	r := f.send(t, "GET", fmt.Sprintf("/api/v1/items/%d", run.Items[0].ID), readToken, "")
	if r.code != http.StatusOK {
		t.Fatalf("GET item: %d %s", r.code, r.body)
	}
	r.json(t, &detail)
	if detail.Item.TraceParent != tp || detail.Item.TraceState != ts {
		t.Errorf("GET item: trace context %q, %q", detail.Item.TraceParent, detail.Item.TraceState)
	}
}
