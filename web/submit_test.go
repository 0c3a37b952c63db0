package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
)

const (
	readToken   = "read-token-0123456789"
	submitToken = "submit-token-0123456789"
	adminToken  = "admin-token-0123456789"
)

func scopedOptions() web.Options {
	return web.Options{
		Tokens: []web.Token{
			{Name: "reader", Scopes: []web.Scope{web.ScopeRead}, Secret: readToken},
			{Name: "app", Scopes: []web.Scope{web.ScopeRead, web.ScopeSubmit}, Secret: submitToken},
			{Name: "ops", Scopes: []web.Scope{web.ScopeRead, web.ScopeAdmin}, Secret: adminToken},
		},
		Pipelines: []web.PipelineRef{{Name: "docs", FirstStage: "fetch"}, {Name: "mail", FirstStage: "fetch"}},
		// docs has a secret for callbacks, mail none.
		CallbackSigned: func(p string) bool { return p == "docs" },
	}
}

// send makes a request with a bearer token and extra headers.
func (f *fixture) send(t *testing.T, method, target, tok, body string, header ...string) response {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return response{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

type submitted struct {
	Run     redrive.Run `json:"run"`
	Created bool        `json:"created"`
	Items   []struct {
		ID       int64  `json:"id"`
		Key      string `json:"key"`
		Existing bool   `json:"existing"`
		RunID    int64  `json:"run_id"`
	} `json:"items"`
	Added, Existing int
}

func (f *fixture) submit(t *testing.T, code int, target, body string, header ...string) submitted {
	t.Helper()
	r := f.send(t, "POST", target, submitToken, body, header...)
	if r.code != code {
		t.Fatalf("POST %s: %d, want %d: %s", target, r.code, code, r.body)
	}
	var s submitted
	r.json(t, &s)
	return s
}

// snapshot is what the store holds, to check that a refused request
// changed nothing.
type snapshot struct{ runs, items int }

func (f *fixture) snapshot(t *testing.T) snapshot {
	t.Helper()
	runs, err := f.store.ListRuns(context.Background(), redrive.RunFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return snapshot{runs: len(runs), items: f.count(t, redrive.ItemFilter{})}
}

func TestSubmitRetriedIsIdempotent(t *testing.T) {
	f := newFixture(t, scopedOptions())
	before := f.snapshot(t)
	body := `{"pipeline":"docs","failure_budget":0.2,"items":[{"input":{"doc":"a"}},{"key":"b","input":"text","priority":5},{"input":[1,2],"callback":"https://app.example/hooks/redrive"}]}`
	first := f.submit(t, http.StatusCreated, "/api/v1/runs", body, "Idempotency-Key", "order-77")
	if !first.Created || first.Added != 3 || first.Existing != 0 || first.Run.Counts.Pending != 3 || first.Run.Name != "order-77" {
		t.Fatalf("first submit = %+v", first)
	}
	if first.Run.Options.FailureBudget != 0.2 {
		t.Errorf("failure budget = %v", first.Run.Options.FailureBudget)
	}
	// The client did not see the answer and sends the same request again.
	again := f.submit(t, http.StatusOK, "/api/v1/runs", body, "Idempotency-Key", "order-77")
	if again.Created || again.Added != 0 || again.Existing != 3 || again.Run.ID != first.Run.ID {
		t.Fatalf("retried submit = %+v", again)
	}
	for i := range first.Items {
		if again.Items[i].ID != first.Items[i].ID || !again.Items[i].Existing {
			t.Errorf("item %d: first %+v, retry %+v", i, first.Items[i], again.Items[i])
		}
	}
	if got := f.snapshot(t); got.runs != before.runs+1 || got.items != before.items+3 {
		t.Errorf("store went from %+v to %+v, want one run and 3 items more", before, got)
	}
	it, err := f.store.GetItem(context.Background(), first.Items[1].ID)
	if err != nil || it.Key != "b" || it.Priority != 5 || string(it.Payload) != `"text"` || it.Stage != "fetch" {
		t.Errorf("stored item = %+v, %v", it, err)
	}

	// The same keys through the pipeline endpoint are the same items.
	viaPipeline := f.submit(t, http.StatusCreated, "/api/v1/pipelines/docs/items", `{"items":[{"key":"b","input":"other"},{"key":"c","input":1}]}`)
	if viaPipeline.Items[0].ID != first.Items[1].ID || !viaPipeline.Items[0].Existing || viaPipeline.Added != 1 || viaPipeline.Run.Name != web.DefaultSubmitRun {
		t.Errorf("pipeline submit = %+v", viaPipeline)
	}
	more := f.submit(t, http.StatusOK, fmt.Sprintf("/api/v1/runs/%d/items", first.Run.ID), `{"items":[{"key":"d","input":{}}]}`)
	if more.Added != 1 || more.Run.Counts.Total != 4 {
		t.Errorf("add to run = %+v", more)
	}
}

func TestSubmitReopensFinishedRun(t *testing.T) {
	f := newFixture(t, scopedOptions())
	s := f.submit(t, http.StatusCreated, "/api/v1/runs", `{"pipeline":"mail","name":"nightly","items":[]}`)
	if err := f.store.SetRunStatus(context.Background(), s.Run.ID, redrive.RunCompleted, "", t0); err != nil {
		t.Fatal(err)
	}
	s = f.submit(t, http.StatusOK, "/api/v1/pipelines/mail/items", `{"run":"nightly","items":[{"input":1,"key":"n1"}]}`)
	if s.Run.Status != redrive.RunRunning || s.Added != 1 {
		t.Errorf("after adding to a finished run: %+v", s)
	}
	if _, err := f.store.FinishRun(context.Background(), s.Run.ID, redrive.RunAborted, "budget", t0); err != nil {
		t.Fatal(err)
	}
	before := f.snapshot(t)
	msg, _ := f.send(t, "POST", "/api/v1/pipelines/mail/items", submitToken, `{"run":"nightly","items":[{"input":2}]}`).apiErr(t, http.StatusConflict)
	if !strings.Contains(msg, "aborted") {
		t.Errorf("aborted run: %q", msg)
	}
	if got := f.snapshot(t); got != before {
		t.Errorf("refused submit changed the store: %+v -> %+v", before, got)
	}
}

func TestSubmitBadInput(t *testing.T) {
	opts := scopedOptions()
	opts.MaxSubmitBytes = 64 << 10
	opts.MaxBatchItems = 10
	f := newFixture(t, opts)
	big := `{"pipeline":"docs","items":[{"input":"` + strings.Repeat("x", 70<<10) + `"}]}`
	cases := []struct {
		name, target, body string
		code               int
		field, says        string
	}{
		{"malformed JSON", "/api/v1/runs", `{"pipeline":"docs","items":[{"input":1},`, 400, "", "invalid JSON"},
		{"not an object", "/api/v1/runs", `[1]`, 400, "", "JSON"},
		{"oversized body", "/api/v1/runs", big, 413, "", "larger than"},
		{"unknown pipeline", "/api/v1/runs", `{"pipeline":"nope","items":[]}`, 404, "pipeline", `unknown pipeline "nope"`},
		{"unknown pipeline in path", "/api/v1/pipelines/nope/items", `{"items":[]}`, 404, "name", `unknown pipeline "nope"`},
		{"missing pipeline", "/api/v1/runs", `{"items":[]}`, 400, "pipeline", "required"},
		{"missing items", "/api/v1/runs", `{"pipeline":"docs"}`, 400, "items", "required"},
		{"unknown field", "/api/v1/runs", `{"pipeline":"docs","itemz":[]}`, 400, "itemz", "unknown field"},
		{"bad threshold", "/api/v1/runs", `{"pipeline":"docs","failure_budget":2,"items":[]}`, 400, "failure_budget", "between 0 and 1"},
		{"item not an object", "/api/v1/runs", `{"pipeline":"docs","items":[{"input":1},7]}`, 400, "items[1]", "object"},
		{"missing input", "/api/v1/runs", `{"pipeline":"docs","items":[{"input":1},{"input":2},{"key":"k"}]}`, 400, "items[2].input", "required"},
		{"unknown item field", "/api/v1/runs", `{"pipeline":"docs","items":[{"input":1,"prio":3}]}`, 400, "items[0].prio", "unknown field"},
		{"wrong type", "/api/v1/runs", `{"pipeline":"docs","items":[{"input":1},{"input":1,"priority":"high"}]}`, 400, "items[1].priority", "must be a JSON integer, got a JSON string"},
		{"duplicate key", "/api/v1/runs", `{"pipeline":"docs","items":[{"key":"a","input":1},{"key":"b","input":1},{"key":"c","input":1},{"key":"a","input":1}]}`, 400, "items[3].key", "items[0]"},
		{"long key", "/api/v1/runs", `{"pipeline":"docs","items":[{"key":"` + strings.Repeat("k", 600) + `","input":1}]}`, 400, "items[0].key", "longer"},
		{"bad order_at", "/api/v1/runs", `{"pipeline":"docs","items":[{"input":1,"order_at":"yesterday"}]}`, 400, "items[0].order_at", "RFC 3339"},
		{"bad callback", "/api/v1/runs", `{"pipeline":"docs","items":[{"input":1},{"input":1,"callback":"ftp://x"}]}`, 400, "items[1].callback", "http"},
		{"callback with password", "/api/v1/runs", `{"pipeline":"docs","items":[{"input":1,"callback":"https://u:p@x.example/"}]}`, 400, "items[0].callback", "user information"},
		{"unsigned callback", "/api/v1/runs", `{"pipeline":"mail","items":[{"input":1},{"input":1,"callback":"https://app.example/cb"}]}`, 400, "items[1].callback", `no secret signs the callbacks of pipeline "mail"`},
		{"unsigned callback in path", "/api/v1/pipelines/mail/items", `{"items":[{"input":1,"callback":"https://app.example/cb"}]}`, 400, "items[0].callback", "callback-secret-file"},
		{"too many items", "/api/v1/runs", `{"pipeline":"docs","items":[` + strings.Repeat(`{"input":1},`, 10) + `{"input":1}]}`, 400, "items", "at most 10"},
		{"run in the run endpoint", fmt.Sprintf("/api/v1/runs/%d/items", f.docsRun), `{"run":"x","items":[]}`, 400, "run", "path"},
		{"unknown run", "/api/v1/runs/9999/items", `{"items":[{"input":1}]}`, 404, "", "run 9999 does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := f.snapshot(t)
			msg, field := f.send(t, "POST", tc.target, submitToken, tc.body).apiErr(t, tc.code)
			if field != tc.field || !strings.Contains(msg, tc.says) {
				t.Errorf("error %q (field %q), want field %q and %q", msg, field, tc.field, tc.says)
			}
			if got := f.snapshot(t); got != before {
				t.Errorf("refused request changed the store: %+v -> %+v", before, got)
			}
		})
	}
}

func TestScopedTokens(t *testing.T) {
	f := newFixture(t, scopedOptions())
	submit := `{"pipeline":"docs","items":[{"input":1}]}`
	cases := []struct {
		name, method, target, tok, body string
		code                            int
	}{
		{"read without token", "GET", "/api/v1/runs", "", "", 401},
		{"read with a wrong token", "GET", "/api/v1/runs", "not-a-token-at-all", "", 401},
		{"read", "GET", "/api/v1/runs", readToken, "", 200},
		{"submit without token", "POST", "/api/v1/runs", "", submit, 401},
		{"submit with a wrong token", "POST", "/api/v1/runs", adminToken + "x", submit, 401},
		{"submit with a read-only token", "POST", "/api/v1/runs", readToken, submit, 403},
		{"submit with an admin token", "POST", "/api/v1/runs", adminToken, submit, 403},
		{"admin with a submit token", "POST", "/api/v1/dlq/purge", submitToken, `{"dry_run":true}`, 403},
		{"admin with a read token", "POST", fmt.Sprintf("/api/v1/runs/%d/cancel", f.mailRun), readToken, `{}`, 403},
		{"admin", "POST", "/api/v1/dlq/purge", adminToken, `{"dry_run":true}`, 200},
		{"submit", "POST", "/api/v1/runs", submitToken, submit, 201},
	}
	for _, tc := range cases {
		before := f.snapshot(t)
		r := f.send(t, tc.method, tc.target, tc.tok, tc.body)
		if r.code != tc.code {
			t.Errorf("%s: %d, want %d: %s", tc.name, r.code, tc.code, r.body)
			continue
		}
		if tc.code == 401 && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: 401 without WWW-Authenticate", tc.name)
		}
		if tc.code >= 400 && f.snapshot(t) != before {
			t.Errorf("%s: refused request changed the store", tc.name)
		}
	}
	for _, secret := range []string{readToken, submitToken, adminToken} {
		if strings.Contains(f.logs.String(), secret) {
			t.Fatalf("a token secret was logged")
		}
	}
	if !strings.Contains(f.logs.String(), "token=app") {
		t.Errorf("the request log does not name the token used:\n%s", f.logs)
	}

	// The single token of old is a submit and admin token; reads stay
	// open when no token has the read scope.
	legacy := newFixture(t, web.Options{Token: token, Pipelines: scopedOptions().Pipelines})
	if r := legacy.send(t, "GET", "/api/v1/runs", "", ""); r.code != 200 {
		t.Errorf("open read: %d", r.code)
	}
	if r := legacy.send(t, "POST", "/api/v1/runs", token, submit); r.code != 201 {
		t.Errorf("legacy token submit: %d %s", r.code, r.body)
	}
	if r := legacy.send(t, "POST", "/api/v1/dlq/purge", token, `{"dry_run":true}`); r.code != 200 {
		t.Errorf("legacy token admin: %d %s", r.code, r.body)
	}
	none := newFixture(t, web.Options{Pipelines: scopedOptions().Pipelines})
	none.send(t, "POST", "/api/v1/runs", "whatever", submit).apiErr(t, http.StatusForbidden)
}

func TestCancelItem(t *testing.T) {
	f := newFixture(t, scopedOptions())
	s := f.submit(t, http.StatusCreated, "/api/v1/runs", `{"pipeline":"mail","items":[{"input":1},{"input":2},{"input":3}]}`)
	id := s.Items[1].ID
	r := f.send(t, "POST", fmt.Sprintf("/api/v1/items/%d/cancel", id), adminToken, `{"reason":"customer withdrew"}`)
	if r.code != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.code, r.body)
	}
	for i, it := range s.Items {
		got, err := f.store.GetItem(context.Background(), it.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := redrive.StatePending
		if i == 1 {
			want = redrive.StateCanceled
			if got.Reason == nil || got.Reason.Error != "customer withdrew" || got.Reason.Class != redrive.ClassCanceled {
				t.Errorf("reason = %+v", got.Reason)
			}
		}
		if got.State != want {
			t.Errorf("item %d is %s, want %s", it.ID, got.State, want)
		}
	}
	msg, _ := f.send(t, "POST", fmt.Sprintf("/api/v1/items/%d/cancel", id), adminToken, `{}`).apiErr(t, http.StatusConflict)
	if !strings.Contains(msg, "canceled, not pending") {
		t.Errorf("second cancel: %q", msg)
	}
	f.send(t, "POST", "/api/v1/items/999999/cancel", adminToken, `{}`).apiErr(t, http.StatusNotFound)
}

// TestSubmitOrderAt checks that a submitted order time is kept on the item,
// where claims order by it.
func TestSubmitOrderAt(t *testing.T) {
	f := newFixture(t, scopedOptions())
	s := f.submit(t, 201, "/api/v1/runs", `{"pipeline":"docs","items":[
		{"key":"late","input":1,"order_at":"2026-11-22T09:00:00Z"},
		{"key":"early","input":2,"order_at":"2026-11-22T08:00:00Z"}]}`)
	if len(s.Items) != 2 {
		t.Fatalf("submitted %d items, want 2", len(s.Items))
	}
	for i, want := range []string{"2026-11-22T09:00:00Z", "2026-11-22T08:00:00Z"} {
		it, err := f.store.GetItem(context.Background(), s.Items[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		if got := it.OrderAt.UTC().Format(time.RFC3339); got != want {
			t.Errorf("item %s: order time %s, want %s", s.Items[i].Key, got, want)
		}
	}
}
