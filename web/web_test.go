package web_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/sqlite"
	"github.com/redrive/redrive/web"
)

const token = "s3cret-token-for-tests"

// t0 is the time the test data was written.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fixture is a real SQLite store with:
//   - run "docs" (docsRun): 120 items; by i%4: dead final ("corrupt
//     document i"), dead retryable ("timeout talking to api"), succeeded,
//     pending (a retry due in an hour). Dead items died at t0+i seconds.
//   - run "mail" (mailRun): 10 pending items.
type fixture struct {
	store   *sqlite.Store
	docsRun int64
	mailRun int64
	h       http.Handler
	logs    *bytes.Buffer
}

func newFixture(t *testing.T, opts web.Options) *fixture {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "redrive.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	f := &fixture{store: s, logs: &bytes.Buffer{}}
	f.docsRun = seedRun(t, s, "docs", 120, func(i int, l redrive.Lease) redrive.Completion {
		at := t0.Add(time.Duration(i) * time.Second)
		c := redrive.Completion{ItemID: l.Item.ID, Token: l.Token, Stage: "fetch", Attempt: 1, Now: at,
			Record: redrive.Attempt{Stage: "fetch", Number: 1, StartedAt: at.Add(-time.Second), FinishedAt: at}}
		switch i % 4 {
		case 0:
			c.State, c.Record.Outcome, c.Record.Class, c.Record.Error = redrive.StateDead, redrive.OutcomeDead, "final", fmt.Sprintf("corrupt document %d", i)
			c.Reason = &redrive.Reason{Stage: "fetch", Class: "final", Error: c.Record.Error, Attempts: 1, At: at}
		case 1:
			c.State, c.Record.Outcome, c.Record.Class, c.Record.Error = redrive.StateDead, redrive.OutcomeDead, "retryable", "timeout talking to api"
			c.Reason = &redrive.Reason{Stage: "fetch", Class: "retryable", Error: c.Record.Error, Attempts: 3, At: at}
		case 2:
			c.State, c.Record.Outcome = redrive.StateSucceeded, redrive.OutcomeSucceeded
			c.Payload = []byte(`{"ok":true}`)
		case 3:
			c.State, c.Record.Outcome, c.Record.Class, c.Record.Error = redrive.StatePending, redrive.OutcomeRetry, "retryable", "503 from api"
			c.NextAt, c.Attempt, c.Record.Delay = at.Add(time.Hour), 2, time.Hour
		}
		return c
	})
	f.mailRun = seedRun(t, s, "mail", 10, nil)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return t0.Add(2 * time.Hour) }
	}
	f.h = web.NewHandler(s, opts)
	return f
}

// seedRun creates a run of n items and, when complete is set, claims them
// and completes item i with complete(i, lease).
func seedRun(t *testing.T, s *sqlite.Store, pipeline string, n int, complete func(int, redrive.Lease) redrive.Completion) int64 {
	t.Helper()
	ctx := context.Background()
	run, _, err := s.CreateRun(ctx, pipeline, redrive.RunOptions{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	items := make([]redrive.NewItem, n)
	for i := range items {
		items[i] = redrive.NewItem{Key: fmt.Sprintf("%s-%03d", pipeline, i), Payload: []byte(fmt.Sprintf(`{"doc":%d}`, i))}
	}
	if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: pipeline, Stage: "fetch", Items: items, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if complete == nil {
		return run.ID
	}
	leases, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "test", Pipelines: []string{pipeline}, Limit: n, LeaseUntil: t0.Add(time.Hour), Now: t0})
	if err != nil || len(leases) != n {
		t.Fatalf("claim: %d leases, %v", len(leases), err)
	}
	cs := make([]redrive.Completion, n)
	for i, l := range leases {
		cs[i] = complete(i, l)
	}
	applied, err := s.Complete(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range applied {
		if !ok {
			t.Fatalf("completion %d not applied", i)
		}
	}
	return run.ID
}

type response struct {
	code   int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type = %q, body %s", ct, r.body)
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// apiErr decodes an error response and checks its status.
func (r response) apiErr(t *testing.T, code int) (msg, field string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("status %d, want %d; body %s", r.code, code, r.body)
	}
	var e struct{ Error, Field string }
	r.json(t, &e)
	if e.Error == "" {
		t.Fatalf("error response without a message: %s", r.body)
	}
	return e.Error, e.Field
}

func (f *fixture) do(t *testing.T, method, target, auth, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return response{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func (f *fixture) get(t *testing.T, target string) response { return f.do(t, "GET", target, "", "") }

func (f *fixture) post(t *testing.T, target, body string) response {
	return f.do(t, "POST", target, "Bearer "+token, body)
}

type page struct {
	Data       []redrive.Item `json:"data"`
	NextCursor string         `json:"next_cursor"`
}

func (f *fixture) items(t *testing.T, target string) page {
	t.Helper()
	r := f.get(t, target)
	if r.code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", target, r.code, r.body)
	}
	var p page
	r.json(t, &p)
	return p
}

func (f *fixture) count(t *testing.T, filter redrive.ItemFilter) int {
	t.Helper()
	n, err := f.store.Count(context.Background(), filter)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var dead = []redrive.State{redrive.StateDead}

func TestAuth(t *testing.T) {
	writes := []struct{ target, body string }{
		{"/api/v1/dlq/redrive", `{"dry_run":true}`},
		{"/api/v1/dlq/purge", `{"dry_run":true}`},
		{"/api/v1/runs/{mail}/cancel", `{}`},
	}
	t.Run("no token configured", func(t *testing.T) {
		f := newFixture(t, web.Options{})
		for _, w := range writes {
			w.target = strings.ReplaceAll(w.target, "{mail}", fmt.Sprint(f.mailRun))
			msg, _ := f.do(t, "POST", w.target, "Bearer anything", w.body).apiErr(t, http.StatusForbidden)
			if !strings.Contains(msg, "no API token is configured") {
				t.Errorf("%s: error %q does not say no token is configured", w.target, msg)
			}
		}
	})
	f := newFixture(t, web.Options{Token: token})
	for _, w := range writes {
		w.target = strings.ReplaceAll(w.target, "{mail}", fmt.Sprint(f.mailRun))
		for _, auth := range []string{"", "Bearer", "Basic " + token, "Bearer wrong", "Bearer " + token + "x", "Bearer " + token[:len(token)-1]} {
			r := f.do(t, "POST", w.target, auth, w.body)
			r.apiErr(t, http.StatusUnauthorized)
			if r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s with %q: no WWW-Authenticate header", w.target, auth)
			}
		}
		if n := f.count(t, redrive.ItemFilter{RunID: f.mailRun, States: []redrive.State{redrive.StatePending}}); n != 10 {
			t.Fatalf("unauthorized requests changed the store: %d pending in the mail run", n)
		}
		if r := f.do(t, "POST", w.target, "Bearer "+token, w.body); r.code != http.StatusOK {
			t.Errorf("%s with the right token: %d %s", w.target, r.code, r.body)
		}
	}
	if n := f.count(t, redrive.ItemFilter{RunID: f.mailRun, States: []redrive.State{redrive.StateCanceled}}); n != 10 {
		t.Errorf("the authorized cancel canceled %d items, want 10", n)
	}
	if strings.Contains(f.logs.String(), token) || strings.Contains(f.logs.String(), "wrong") {
		t.Errorf("the log holds a token:\n%s", f.logs)
	}
}

func TestBodyLimits(t *testing.T) {
	f := newFixture(t, web.Options{Token: token, MaxBodyBytes: 256})
	big := `{"pipeline":"` + strings.Repeat("x", 300) + `","dry_run":true}`
	f.post(t, "/api/v1/dlq/redrive", big).apiErr(t, http.StatusRequestEntityTooLarge)
	f.post(t, "/api/v1/dlq/purge", big).apiErr(t, http.StatusRequestEntityTooLarge)
	f.post(t, fmt.Sprintf("/api/v1/runs/%d/cancel", f.mailRun), `{"reason":"`+strings.Repeat("x", 300)+`"}`).apiErr(t, http.StatusRequestEntityTooLarge)
	if n := f.count(t, redrive.ItemFilter{RunID: f.mailRun, States: []redrive.State{redrive.StatePending}}); n != 10 {
		t.Errorf("an oversized cancel changed the run: %d pending", n)
	}

	_, field := f.post(t, "/api/v1/dlq/redrive", `{"dry_run":true,"pipelin":"docs"}`).apiErr(t, http.StatusBadRequest)
	if field != "pipelin" {
		t.Errorf("unknown field: field %q, want pipelin", field)
	}
	_, field = f.post(t, "/api/v1/dlq/redrive", `{"rate":"fast"}`).apiErr(t, http.StatusBadRequest)
	if field != "rate" {
		t.Errorf("wrong type: field %q, want rate", field)
	}
	f.post(t, "/api/v1/dlq/redrive", `{"dry_run":true} {}`).apiErr(t, http.StatusBadRequest)
	f.post(t, "/api/v1/dlq/redrive", `{"dry_run":`).apiErr(t, http.StatusBadRequest)
	r := f.do(t, "POST", "/api/v1/dlq/redrive", "Bearer "+token, "")
	if r.code != http.StatusOK {
		t.Errorf("empty body: %d %s", r.code, r.body)
	}
	req := httptest.NewRequest("POST", "/api/v1/dlq/redrive", strings.NewReader(`dry_run=true`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest {
		t.Errorf("form body: %d, want 400", rec.Code)
	}
}

func TestPageSize(t *testing.T) {
	f := newFixture(t, web.Options{})
	if p := f.items(t, "/api/v1/items"); len(p.Data) != web.DefaultPageSize || p.NextCursor == "" {
		t.Errorf("default page: %d items, cursor %q", len(p.Data), p.NextCursor)
	}
	if p := f.items(t, "/api/v1/items?limit=500"); len(p.Data) != 130 || p.NextCursor != "" {
		t.Errorf("limit 500: %d items, cursor %q; want all 130 and no cursor", len(p.Data), p.NextCursor)
	}
	for _, l := range []string{"501", "0", "-1", "ten"} {
		if _, field := f.get(t, "/api/v1/items?limit="+l).apiErr(t, http.StatusBadRequest); field != "limit" {
			t.Errorf("limit=%s: field %q", l, field)
		}
	}
	f.get(t, "/api/v1/runs?limit=501").apiErr(t, http.StatusBadRequest)

	small := newFixture(t, web.Options{MaxPageSize: 20})
	if p := small.items(t, "/api/v1/items"); len(p.Data) != 20 {
		t.Errorf("default page above MaxPageSize: %d items, want 20", len(p.Data))
	}
	small.get(t, "/api/v1/items?limit=21").apiErr(t, http.StatusBadRequest)
}

// walk follows next_cursor from target and returns the IDs seen.
func (f *fixture) walk(t *testing.T, target string) []int64 {
	t.Helper()
	var ids []int64
	seen := map[int64]bool{}
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("pagination does not end")
		}
		p := f.items(t, target)
		for _, it := range p.Data {
			if seen[it.ID] {
				t.Fatalf("item %d returned twice", it.ID)
			}
			seen[it.ID] = true
			ids = append(ids, it.ID)
			if it.Payload != nil || it.Input != nil {
				t.Fatalf("list returns payloads: %+v", it)
			}
		}
		if p.NextCursor == "" {
			return ids
		}
		u, _ := url.Parse(target)
		q := u.Query()
		q.Set("cursor", p.NextCursor)
		u.RawQuery = q.Encode()
		target = u.String()
	}
}

func TestCursorPagination(t *testing.T) {
	f := newFixture(t, web.Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		target string
		filter redrive.ItemFilter
	}{
		{"/api/v1/items?limit=7", redrive.ItemFilter{}},
		{"/api/v1/items?limit=1&run=" + fmt.Sprint(f.mailRun), redrive.ItemFilter{RunID: f.mailRun}},
		{"/api/v1/items?limit=10&state=dead,pending", redrive.ItemFilter{States: []redrive.State{redrive.StateDead, redrive.StatePending}}},
		{"/api/v1/dlq?limit=9", redrive.ItemFilter{States: dead}},
		{"/api/v1/dlq?limit=4&class=final", redrive.ItemFilter{States: dead, Class: "final"}},
		{"/api/v1/items?limit=30", redrive.ItemFilter{}}, // 130 = 4 full pages and a partial one
		{"/api/v1/items?limit=13", redrive.ItemFilter{}}, // 130 = exactly 10 pages
	} {
		got := f.walk(t, tc.target)
		tc.filter.Limit = 10000
		want, err := f.store.ListItems(ctx, tc.filter)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("%s: walked %d items, store has %d", tc.target, len(got), len(want))
			continue
		}
		for i := range want {
			if got[i] != want[i].ID {
				t.Errorf("%s: item %d is %d, want %d", tc.target, i, got[i], want[i].ID)
				break
			}
		}
	}

	// Runs page backwards, newest first.
	for range 5 {
		seedRun(t, f.store, "extra", 1, nil)
	}
	var runIDs []int64
	target := "/api/v1/runs?limit=2"
	for {
		var p struct {
			Data       []redrive.Run `json:"data"`
			NextCursor string        `json:"next_cursor"`
		}
		f.get(t, target).json(t, &p)
		for _, r := range p.Data {
			runIDs = append(runIDs, r.ID)
		}
		if p.NextCursor == "" {
			break
		}
		target = "/api/v1/runs?limit=2&cursor=" + url.QueryEscape(p.NextCursor)
	}
	if len(runIDs) != 7 {
		t.Fatalf("walked runs %v, want 7", runIDs)
	}
	for i := 1; i < len(runIDs); i++ {
		if runIDs[i] >= runIDs[i-1] {
			t.Fatalf("runs not newest first: %v", runIDs)
		}
	}
	var p struct{ Data []redrive.Run }
	f.get(t, "/api/v1/runs?pipeline=extra&limit=500").json(t, &p)
	if len(p.Data) != 5 {
		t.Errorf("pipeline filter: %d runs, want 5", len(p.Data))
	}

	// A cursor of one list is refused by another.
	itemsCursor := f.items(t, "/api/v1/items?limit=1").NextCursor
	if _, field := f.get(t, "/api/v1/runs?cursor="+itemsCursor).apiErr(t, http.StatusBadRequest); field != "cursor" {
		t.Errorf("items cursor on runs: field %q", field)
	}
}

func TestFilters(t *testing.T) {
	f := newFixture(t, web.Options{})
	check := func(target string, want int) []redrive.Item {
		t.Helper()
		p := f.items(t, target+"&limit=500")
		if len(p.Data) != want {
			t.Errorf("%s: %d items, want %d", target, len(p.Data), want)
		}
		return p.Data
	}
	check("/api/v1/items?pipeline=docs", 120)
	check("/api/v1/items?pipeline=mail", 10)
	check("/api/v1/items?run="+fmt.Sprint(f.docsRun), 120)
	check("/api/v1/items?state=succeeded", 30)
	check("/api/v1/items?state=pending", 40)
	check("/api/v1/items?state=pending&state=succeeded", 70)
	check("/api/v1/items?stage=fetch&pipeline=docs", 120)
	check("/api/v1/dlq?pipeline=docs", 60)
	check("/api/v1/dlq?state=canceled", 0)
	check("/api/v1/dlq?state=dead,canceled", 60)
	for _, it := range check("/api/v1/dlq?class=final", 30) {
		if it.Reason == nil || it.Reason.Class != "final" || it.State != redrive.StateDead {
			t.Errorf("class=final returned %+v", it)
		}
	}
	check("/api/v1/dlq?class=retryable&error_contains=timeout", 30)
	check("/api/v1/dlq?error_contains=corrupt+document+4", 4) // 4, 40, 44, 48
	// Dead items died at t0+i s for i%4 in {0,1}: i < 20 gives 10 items.
	check("/api/v1/dlq?until="+url.QueryEscape(t0.Add(19*time.Second).Format(time.RFC3339)), 10)
	check("/api/v1/dlq?since="+url.QueryEscape(t0.Add(100*time.Second).Format(time.RFC3339)), 10)
	check("/api/v1/dlq?since="+url.QueryEscape(t0.Format(time.RFC3339))+"&until="+url.QueryEscape(t0.Add(3*time.Second).Format(time.RFC3339Nano)), 2)
}

func TestBadFilterValues(t *testing.T) {
	f := newFixture(t, web.Options{Token: token})
	for _, tc := range []struct{ target, field string }{
		{"/api/v1/items?run=abc", "run"},
		{"/api/v1/items?run=-3", "run"},
		{"/api/v1/items?state=bogus", "state"},
		{"/api/v1/items?state=dead,", "state"},
		{"/api/v1/items?since=yesterday", "since"},
		{"/api/v1/items?until=2026-13-01T00:00:00Z", "until"},
		{"/api/v1/items?since=2026-03-02T00:00:00Z&until=2026-03-01T00:00:00Z", "until"},
		{"/api/v1/items?cursor=not-a-cursor", "cursor"},
		{"/api/v1/items?pipeline=a&pipeline=b", "pipeline"},
		{"/api/v1/items?colour=red", "colour"},
		{"/api/v1/dlq?state=pending", "state"},
		{"/api/v1/dlq?limit=1000", "limit"},
		{"/api/v1/runs?status=done", "status"},
		{"/api/v1/runs/abc", "id"},
		{"/api/v1/items/0", "id"},
		{"/api/v1/stats?run=x", "run"},
		{"/api/v1/dlq/export?since=soon", "since"},
	} {
		msg, field := f.get(t, tc.target).apiErr(t, http.StatusBadRequest)
		if field != tc.field || !strings.Contains(msg, tc.field) {
			t.Errorf("%s: field %q, message %q; want field %q named", tc.target, field, msg, tc.field)
		}
	}
	for _, tc := range []struct{ target, body, field string }{
		{"/api/v1/dlq/redrive", `{"states":["pending"]}`, "states"},
		{"/api/v1/dlq/redrive", `{"rate":-1}`, "rate"},
		{"/api/v1/dlq/redrive", `{"since":"yesterday"}`, "since"},
		{"/api/v1/dlq/redrive", `{"run":"one"}`, "run"},
		{"/api/v1/dlq/redrive", `{"since":"2026-03-02T00:00:00Z","until":"2026-03-01T00:00:00Z"}`, "until"},
		{"/api/v1/dlq/purge", `{"rate":2}`, "rate"},
		{"/api/v1/dlq/purge", `{}`, "all"},
		{"/api/v1/dlq/purge", `{"limit":-1,"class":"final"}`, "limit"},
	} {
		_, field := f.post(t, tc.target, tc.body).apiErr(t, http.StatusBadRequest)
		if field != tc.field {
			t.Errorf("%s %s: field %q, want %q", tc.target, tc.body, field, tc.field)
		}
	}
	if n := f.count(t, redrive.ItemFilter{States: dead}); n != 60 {
		t.Errorf("bad requests changed the store: %d dead", n)
	}
}

func TestRedrive(t *testing.T) {
	f := newFixture(t, web.Options{Token: token})
	var got struct {
		Count  int  `json:"count"`
		DryRun bool `json:"dry_run"`
	}
	f.post(t, "/api/v1/dlq/redrive", `{"class":"final","dry_run":true}`).json(t, &got)
	if got.Count != 30 || !got.DryRun {
		t.Errorf("dry run = %+v, want 30", got)
	}
	if n := f.count(t, redrive.ItemFilter{States: dead}); n != 60 {
		t.Errorf("dry run changed the store: %d dead, want 60", n)
	}
	var events []redrive.Event
	f.h = web.NewHandler(f.store, web.Options{Token: token, Observers: []func(redrive.Event){func(ev redrive.Event) { events = append(events, ev) }}})
	r := f.post(t, "/api/v1/dlq/redrive", fmt.Sprintf(`{"run":%d,"class":"final","rate":10}`, f.docsRun))
	if r.code != http.StatusOK {
		t.Fatalf("redrive: %d %s", r.code, r.body)
	}
	r.json(t, &got)
	if got.Count != 30 || got.DryRun {
		t.Errorf("redrive = %+v, want 30", got)
	}
	if n := f.count(t, redrive.ItemFilter{States: dead}); n != 30 {
		t.Errorf("after redrive %d dead, want 30", n)
	}
	if n := f.count(t, redrive.ItemFilter{States: []redrive.State{redrive.StatePending}, RunID: f.docsRun}); n != 60 {
		t.Errorf("after redrive %d pending, want 60", n)
	}
	if len(events) != 1 || events[0].(redrive.Redriven).Count != 30 {
		t.Errorf("events = %+v, want one Redriven{Count: 30}", events)
	}
	f.post(t, "/api/v1/dlq/redrive", `{"class":"final"}`).json(t, &got)
	if got.Count != 0 {
		t.Errorf("second redrive = %d, want 0", got.Count)
	}
}

func TestPurge(t *testing.T) {
	f := newFixture(t, web.Options{Token: token})
	var got struct{ Count int }
	f.post(t, "/api/v1/dlq/purge", `{"dry_run":true}`).json(t, &got)
	if got.Count != 60 {
		t.Errorf("dry run = %d, want 60", got.Count)
	}
	f.post(t, "/api/v1/dlq/purge", `{"error_contains":"timeout"}`).json(t, &got)
	if got.Count != 30 {
		t.Errorf("purge = %d, want 30", got.Count)
	}
	if n := f.count(t, redrive.ItemFilter{States: dead}); n != 30 {
		t.Errorf("after purge %d dead, want 30", n)
	}
	if n := f.count(t, redrive.ItemFilter{}); n != 100 {
		t.Errorf("after purge %d items, want 100", n)
	}
	f.post(t, "/api/v1/dlq/purge", `{"all":true}`).json(t, &got)
	if got.Count != 30 || f.count(t, redrive.ItemFilter{States: dead}) != 0 {
		t.Errorf("purge all = %d, want 30 and no dead item left", got.Count)
	}
}

func TestCancelRun(t *testing.T) {
	f := newFixture(t, web.Options{Token: token})
	var got struct {
		Canceled int         `json:"canceled"`
		Run      redrive.Run `json:"run"`
	}
	r := f.post(t, fmt.Sprintf("/api/v1/runs/%d/cancel", f.mailRun), `{"reason":"bad batch"}`)
	if r.code != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.code, r.body)
	}
	r.json(t, &got)
	if got.Canceled != 10 || got.Run.Status != redrive.RunAborted || got.Run.Reason != "bad batch" {
		t.Errorf("cancel = %+v", got)
	}
	items, err := f.store.ListItems(context.Background(), redrive.ItemFilter{RunID: f.mailRun})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.State != redrive.StateCanceled || it.Reason == nil || it.Reason.Error != "bad batch" || it.Reason.Class != redrive.ClassCanceled {
			t.Errorf("item after cancel: %+v %+v", it, it.Reason)
		}
	}
	f.post(t, fmt.Sprintf("/api/v1/runs/%d/cancel", f.mailRun), ``).apiErr(t, http.StatusConflict)
	f.post(t, "/api/v1/runs/999/cancel", ``).apiErr(t, http.StatusNotFound)
	f.post(t, "/api/v1/runs/999/cancel", `{"why":"x"}`).apiErr(t, http.StatusBadRequest)
	// The docs run keeps its pending items.
	if n := f.count(t, redrive.ItemFilter{RunID: f.docsRun, States: []redrive.State{redrive.StatePending}}); n != 30 {
		t.Errorf("other run: %d pending, want 30", n)
	}
}

func TestReadEndpoints(t *testing.T) {
	f := newFixture(t, web.Options{Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, "redrive_redriven_total 0\n")
	})})
	var run struct {
		Run            redrive.Run               `json:"run"`
		SuccessRate    float64                   `json:"success_rate"`
		Stages         []redrive.StateCount      `json:"stages"`
		RetryHistogram []redrive.HistogramBucket `json:"retry_histogram"`
		TopErrors      []redrive.ErrorCount      `json:"top_errors"`
	}
	f.get(t, fmt.Sprintf("/api/v1/runs/%d", f.docsRun)).json(t, &run)
	if c := run.Run.Counts; c.Total != 120 || c.Dead != 60 || c.Succeeded != 30 || c.Pending != 30 {
		t.Errorf("run counts = %+v", c)
	}
	if run.SuccessRate != 0.25 || len(run.Stages) == 0 || len(run.TopErrors) == 0 || run.RetryHistogram == nil {
		t.Errorf("run detail = %+v", run)
	}
	f.get(t, "/api/v1/runs/999").apiErr(t, http.StatusNotFound)

	items := f.items(t, "/api/v1/dlq?limit=1")
	var item struct {
		Item     redrive.Item      `json:"item"`
		Attempts []redrive.Attempt `json:"attempts"`
	}
	f.get(t, fmt.Sprintf("/api/v1/items/%d", items.Data[0].ID)).json(t, &item)
	if item.Item.Reason == nil || len(item.Attempts) != 1 || item.Attempts[0].Outcome != redrive.OutcomeDead || string(item.Item.Input) == "" {
		t.Errorf("item detail = %+v", item)
	}
	f.get(t, "/api/v1/items/99999").apiErr(t, http.StatusNotFound)

	var stats struct {
		Totals redrive.Counts
		Stages []redrive.StateCount
	}
	f.get(t, "/api/v1/stats").json(t, &stats)
	if stats.Totals.Total != 130 || stats.Totals.Dead != 60 {
		t.Errorf("stats = %+v", stats.Totals)
	}
	f.get(t, "/api/v1/stats?pipeline=mail").json(t, &stats)
	if stats.Totals.Total != 10 || stats.Totals.Pending != 10 {
		t.Errorf("stats of mail = %+v", stats.Totals)
	}
	f.get(t, fmt.Sprintf("/api/v1/stats?run=%d", f.mailRun)).json(t, &stats)
	if stats.Totals.Total != 10 {
		t.Errorf("stats of the mail run = %+v", stats.Totals)
	}
	f.get(t, "/api/v1/stats?run=999").apiErr(t, http.StatusNotFound)

	// Export: JSON lines of dead items with their attempts.
	r := f.get(t, "/api/v1/dlq/export?class=final")
	if r.code != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "application/x-ndjson") {
		t.Fatalf("export: %d %v", r.code, r.header)
	}
	lines := 0
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	for sc.Scan() {
		var rec redrive.ExportRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Item.Reason.Class != "final" || len(rec.Attempts) != 1 {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		lines++
	}
	if lines != 30 {
		t.Errorf("export: %d lines, want 30", lines)
	}

	var health struct{ Status string }
	f.get(t, "/healthz").json(t, &health)
	if health.Status != "ok" {
		t.Errorf("healthz = %+v", health)
	}
	f.get(t, "/readyz").json(t, &health)
	if health.Status != "ready" {
		t.Errorf("readyz = %+v", health)
	}
	if m := f.get(t, "/metrics"); m.code != http.StatusOK || !strings.Contains(string(m.body), "redrive_redriven_total") {
		t.Errorf("metrics: %d %s", m.code, m.body)
	}
	f.get(t, "/api/v1/nothing").apiErr(t, http.StatusNotFound)
	f.get(t, "/nothing").apiErr(t, http.StatusNotFound)
	r = f.do(t, "DELETE", "/api/v1/runs", "", "")
	r.apiErr(t, http.StatusMethodNotAllowed)
	if r.header.Get("Allow") != "GET, POST" {
		t.Errorf("Allow = %q", r.header.Get("Allow"))
	}
	f.get(t, "/api/v1/dlq/redrive").apiErr(t, http.StatusMethodNotAllowed)

	noMetrics := newFixture(t, web.Options{})
	noMetrics.get(t, "/metrics").apiErr(t, http.StatusNotFound)
	down := newFixture(t, web.Options{Ready: func(context.Context) error { return errors.New("database is locked") }})
	if msg, _ := down.get(t, "/readyz").apiErr(t, http.StatusServiceUnavailable); !strings.Contains(msg, "database is locked") {
		t.Errorf("readyz message %q", msg)
	}
}

func TestStoreErrorsAreNotLeaked(t *testing.T) {
	f := newFixture(t, web.Options{})
	f.store.Close()
	msg, _ := f.get(t, "/api/v1/items").apiErr(t, http.StatusInternalServerError)
	if strings.Contains(msg, "sql") {
		t.Errorf("500 message leaks the store error: %q", msg)
	}
	if !strings.Contains(f.logs.String(), "list items") {
		t.Errorf("the store error was not logged:\n%s", f.logs)
	}
	f.get(t, "/readyz").apiErr(t, http.StatusServiceUnavailable)
}

func TestUI(t *testing.T) {
	f := newFixture(t, web.Options{})
	r := f.get(t, "/")
	if r.code != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %v", r.code, r.header)
	}
	if !strings.Contains(string(r.body), `<script src="/ui/app.js"`) || !strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("UI page: CSP %q body %s", r.header.Get("Content-Security-Policy"), r.body)
	}
	for _, asset := range []string{"/ui/app.js", "/ui/app.css"} {
		a := f.get(t, asset)
		if a.code != http.StatusOK || len(a.body) == 0 {
			t.Errorf("%s: %d", asset, a.code)
		}
	}
	js := string(f.get(t, "/ui/app.js").body)
	for _, path := range []string{"/runs", "/dlq", "/items/"} {
		if !strings.Contains(js, path) {
			t.Errorf("app.js does not use %s", path)
		}
	}
	if strings.Contains(js, "innerHTML") {
		t.Error("app.js uses innerHTML: values from the API must be inserted as text")
	}
}

func TestServe(t *testing.T) {
	f := newFixture(t, web.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- web.ServeListener(ctx, ln, f.h) }()
	res, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("healthz over TCP: %d", res.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeListener after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeListener did not return after ctx ended")
	}
	if err := web.Serve(context.Background(), "256.0.0.1:1", f.h); err == nil {
		t.Error("Serve on a bad address returned nil")
	}
}
