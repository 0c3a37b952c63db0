package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/sqlite"
	"github.com/redrive/redrive/web"
)

// eachStore runs fn on a fresh SQLite store and a fresh PostgreSQL schema.
func eachStore(t *testing.T, fn func(t *testing.T, s redrive.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
	t.Run("postgres", func(t *testing.T) { fn(t, pgtest.OpenStore(t)) })
}

// call makes a request to h and decodes a JSON answer into v (when not
// nil), failing unless the status is code.
func call(t *testing.T, h http.Handler, method, target, tok, body string, code int, v any) {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != code {
		t.Fatalf("%s %s: %d, want %d: %s", method, target, rec.Code, code, rec.Body)
	}
	if v != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, target, rec.Body, err)
		}
	}
}

// seedAttempts makes a run of pipeline p, created at t0, with one item per
// outcome, each attempt finished at t0 plus the given offset, at stage
// "fetch".
func seedAttempts(t *testing.T, s redrive.Store, p string, outcomes []redrive.Outcome, offsets []time.Duration) int64 {
	t.Helper()
	return seedAttemptsAt(t, s, p, t0, outcomes, offsets)
}

// seedAttemptsAt is seedAttempts with a run created at t0.
func seedAttemptsAt(t *testing.T, s redrive.Store, p string, t0 time.Time, outcomes []redrive.Outcome, offsets []time.Duration) int64 {
	t.Helper()
	ctx := context.Background()
	run, _, err := s.CreateRun(ctx, p, redrive.RunOptions{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	items := make([]redrive.NewItem, len(outcomes))
	if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: p, Stage: "fetch", Items: items, Now: t0}); err != nil {
		t.Fatal(err)
	}
	ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "seed", Pipelines: []string{p}, Limit: len(items), LeaseUntil: t0.Add(time.Hour), Now: t0})
	if err != nil || len(ls) != len(items) {
		t.Fatalf("claim: %d, %v", len(ls), err)
	}
	var cs []redrive.Completion
	for i, l := range ls {
		at := t0.Add(offsets[i])
		c := redrive.Completion{ItemID: l.Item.ID, Token: l.Token, Stage: "fetch", Attempt: 1, Now: at, NextAt: at.Add(time.Hour),
			Record: redrive.Attempt{Stage: "fetch", Number: 1, Outcome: outcomes[i], StartedAt: at.Add(-time.Second), FinishedAt: at}}
		switch outcomes[i] {
		case redrive.OutcomeSucceeded:
			c.State = redrive.StateSucceeded
		case redrive.OutcomeDead:
			c.State, c.Reason = redrive.StateDead, &redrive.Reason{Stage: "fetch", Class: "final", Error: "bad", Attempts: 1, At: at}
		default:
			c.State = redrive.StatePending
		}
		cs = append(cs, c)
	}
	if _, err := s.Complete(ctx, cs); err != nil {
		t.Fatal(err)
	}
	return run.ID
}

// TestTimelineAPI: the timeline's buckets, its defaults for a run, and its
// refusals, on both stores.
func TestTimelineAPI(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		h := web.NewHandler(s, web.Options{Now: func() time.Time { return t0.Add(10 * time.Minute) }})
		ok, retry, dead := redrive.OutcomeSucceeded, redrive.OutcomeRetry, redrive.OutcomeDead
		run := seedAttempts(t, s, "docs", []redrive.Outcome{ok, ok, retry, dead, ok}, []time.Duration{
			5 * time.Second, 50 * time.Second, 61 * time.Second, 3 * time.Minute, 11 * time.Minute})
		seedAttempts(t, s, "mail", []redrive.Outcome{ok}, []time.Duration{10 * time.Second})

		var tl struct {
			Since, Until time.Time
			Step         float64
			Buckets      int
			Data         []redrive.TimelineBucket
		}
		q := "/api/v1/timeline?pipeline=docs&since=" + t0.Format(time.RFC3339) + "&until=" + t0.Add(5*time.Minute).Format(time.RFC3339) + "&step=1m"
		call(t, h, "GET", q, "", "", http.StatusOK, &tl)
		type bk struct{ bucket, attempts, succeeded, retried, dead int }
		var got []bk
		for _, b := range tl.Data {
			if b.Pipeline != "docs" || b.Stage != "fetch" || !b.Start.Equal(t0.Add(time.Duration(b.Bucket)*time.Minute)) {
				t.Errorf("bucket %+v: wrong pipeline, stage or start", b)
			}
			got = append(got, bk{b.Bucket, b.Attempts, b.Succeeded, b.Retried, b.Dead})
		}
		want := []bk{{0, 2, 2, 0, 0}, {1, 1, 0, 1, 0}, {3, 1, 0, 0, 1}}
		if tl.Buckets != 5 || tl.Step != 60 || !slices.Equal(got, want) {
			t.Errorf("timeline: %d buckets of %g s, %+v; want 5 of 60 s, %+v", tl.Buckets, tl.Step, got, want)
		}

		// A run's timeline starts at its creation and ends now; the step
		// is a round one for about 60 buckets.
		call(t, h, "GET", "/api/v1/timeline?run="+strconv.FormatInt(run, 10), "", "", http.StatusOK, &tl)
		total := 0
		for _, b := range tl.Data {
			total += b.Attempts
		}
		if !tl.Since.Equal(t0) || !tl.Until.Equal(t0.Add(10*time.Minute)) || tl.Step != 10 || tl.Buckets != 60 || total != 4 {
			t.Errorf("run timeline: %v to %v by %g s, %d buckets, %d attempts; want t0 to t0+10m by 10 s, 60, 4 (the one after now left out)",
				tl.Since, tl.Until, tl.Step, tl.Buckets, total)
		}

		for target, code := range map[string]int{
			"/api/v1/timeline?step=1ms":                           http.StatusBadRequest,
			"/api/v1/timeline?step=soon":                          http.StatusBadRequest,
			"/api/v1/timeline?pipeline=nope":                      http.StatusBadRequest,
			"/api/v1/timeline?run=999":                            http.StatusNotFound,
			"/api/v1/timeline?bogus=1":                            http.StatusBadRequest,
			"/api/v1/timeline?since=2026-03-01T13:00:00Z":         http.StatusBadRequest, // after until (now)
			"/api/v1/timeline?since=2026-03-01T12:00:00Z&step=1s": http.StatusOK,         // 600 buckets
		} {
			call(t, h, "GET", target, "", "", code, nil)
		}
	})
}

// TestWorkersAPI: live and stale workers with the items each holds, and
// the leases of an owner with no worker row, on both stores.
func TestWorkersAPI(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		now := t0.Add(time.Minute)
		h := web.NewHandler(s, web.Options{Now: func() time.Time { return now }})
		run, _, err := s.CreateRun(ctx, "docs", redrive.RunOptions{}, t0)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "docs", Stage: "fetch", Items: make([]redrive.NewItem, 9), Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		claim := func(owner string, n int) {
			ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: owner, Pipelines: []string{"docs"}, Limit: n, LeaseUntil: now.Add(time.Minute), Now: t0})
			if err != nil || len(ls) != n {
				t.Fatalf("claim %d for %s: %d, %v", n, owner, len(ls), err)
			}
		}
		claim("host-a:1", 7)
		claim("gone:9", 2)
		for _, w := range []redrive.Worker{
			{Owner: "host-a:1", Host: "host-a", PID: 1, Pipelines: []string{"docs"}, StartedAt: t0, LastSeen: now, ExpiresAt: now.Add(30 * time.Second)},
			{Owner: "host-b:2", Host: "host-b", PID: 2, Pipelines: []string{"docs"}, StartedAt: t0, LastSeen: t0, ExpiresAt: t0.Add(30 * time.Second)},
		} {
			if err := s.UpsertWorker(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		var got struct {
			Data []struct {
				redrive.Worker
				Live   bool
				Leased int
				Work   []redrive.LeaseLoad
			}
			Orphaned []redrive.LeaseLoad
		}
		call(t, h, "GET", "/api/v1/workers", "", "", http.StatusOK, &got)
		if len(got.Data) != 2 || got.Data[0].Owner != "host-a:1" || !got.Data[0].Live || got.Data[1].Live {
			t.Fatalf("workers = %+v; want host-a live, then host-b stale", got.Data)
		}
		a := got.Data[0]
		ids := []int64{res[0].ID, res[1].ID, res[2].ID, res[3].ID, res[4].ID}
		if a.Leased != 7 || len(a.Work) != 1 || a.Work[0].Stage != "fetch" || a.Work[0].Count != 7 || !slices.Equal(a.Work[0].ItemIDs, ids) {
			t.Errorf("host-a works %d: %+v; want 7 at docs/fetch, sample %v", a.Leased, a.Work, ids)
		}
		if got.Data[1].Leased != 0 || len(got.Data[1].Work) != 0 {
			t.Errorf("host-b works %+v, want nothing", got.Data[1].Work)
		}
		if len(got.Orphaned) != 1 || got.Orphaned[0].Owner != "gone:9" || got.Orphaned[0].Count != 2 {
			t.Errorf("orphaned = %+v, want gone:9 with 2", got.Orphaned)
		}
	})
}

// TestStagesAPI: pause and resume need the admin scope, show in the stages
// list with who, when and why, reach the engine's claims, and are recorded
// in the audit log once each; on both stores.
func TestStagesAPI(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		opts := scopedOptions()
		opts.Now = func() time.Time { return t0 }
		h := web.NewHandler(s, opts)
		seedAttempts(t, s, "docs", []redrive.Outcome{redrive.OutcomeSucceeded, redrive.OutcomeRetry, redrive.OutcomeRetry},
			[]time.Duration{time.Second, time.Second, time.Second})

		body := `{"pipeline":"docs","stage":"fetch","reason":"the API is down"}`
		call(t, h, "POST", "/api/v1/stages/pause", readToken, body, http.StatusForbidden, nil)
		call(t, h, "POST", "/api/v1/stages/pause", "", body, http.StatusUnauthorized, nil)
		call(t, h, "POST", "/api/v1/stages/pause", adminToken, `{"pipeline":"docs"}`, http.StatusBadRequest, nil)
		call(t, h, "POST", "/api/v1/stages/pause", adminToken, `{"pipeline":"docs","stage":"fetch","reason":"`+strings.Repeat("x", 501)+`"}`, http.StatusBadRequest, nil)
		call(t, h, "POST", "/api/v1/stages/pause", adminToken, `{"pipeline":"nope","stage":"fetch"}`, http.StatusBadRequest, nil)
		if ps, _ := s.PausedStages(ctx); len(ps) != 0 {
			t.Fatalf("refused requests paused %+v", ps)
		}

		var act struct {
			Changed bool
			Paused  *redrive.StagePause
		}
		call(t, h, "POST", "/api/v1/stages/pause", adminToken, body, http.StatusOK, &act)
		if !act.Changed || act.Paused == nil || act.Paused.By != "ops" || act.Paused.Reason != "the API is down" || !act.Paused.At.Equal(t0) {
			t.Errorf("pause = %+v %+v", act, act.Paused)
		}
		call(t, h, "POST", "/api/v1/stages/pause", adminToken, `{"pipeline":"docs","stage":"fetch","reason":"again"}`, http.StatusOK, &act)
		if act.Changed || act.Paused == nil || act.Paused.Reason != "the API is down" {
			t.Errorf("pausing again = %+v %+v; want unchanged, the first pause kept", act, act.Paused)
		}

		var st struct {
			Data []struct {
				Pipeline, Stage string
				Counts          map[string]int
				Paused          *redrive.StagePause
				Workers         int
			}
		}
		call(t, h, "GET", "/api/v1/stages", readToken, "", http.StatusOK, &st)
		// docs/fetch holds the items; mail/fetch is known from the
		// server's pipelines only.
		if len(st.Data) != 2 || st.Data[0].Stage != "fetch" || st.Data[0].Paused == nil || st.Data[0].Counts["pending"] != 2 ||
			st.Data[0].Counts["succeeded"] != 1 || st.Data[1].Pipeline != "mail" || st.Data[1].Paused != nil {
			t.Errorf("stages = %+v", st.Data)
		}

		// The engine's claims skip the paused stage (the store's view of
		// it, as every process reads it).
		if ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "x", Pipelines: []string{"docs"}, Exclude: pausedKeys(t, s), Limit: 10,
			LeaseUntil: t0.Add(3 * time.Hour), Now: t0.Add(2 * time.Hour)}); err != nil || len(ls) != 0 {
			t.Errorf("claimed %d items of a paused stage, %v", len(ls), err)
		}

		call(t, h, "POST", "/api/v1/stages/resume", adminToken, `{"pipeline":"docs","stage":"fetch","reason":"x"}`, http.StatusBadRequest, nil)
		act.Changed, act.Paused = false, nil
		call(t, h, "POST", "/api/v1/stages/resume", adminToken, `{"pipeline":"docs","stage":"fetch"}`, http.StatusOK, &act)
		if !act.Changed || act.Paused != nil {
			t.Errorf("resume = %+v", act)
		}
		call(t, h, "POST", "/api/v1/stages/resume", adminToken, `{"pipeline":"docs","stage":"fetch"}`, http.StatusOK, &act)
		if act.Changed {
			t.Errorf("resuming a running stage changed it")
		}
		if len(pausedKeys(t, s)) != 0 {
			t.Errorf("still paused after resume")
		}

		acts, err := s.ListActions(ctx, redrive.AuditFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, a := range acts {
			kinds = append(kinds, a.Kind+" "+a.Actor+" "+a.Filter+" "+a.Detail)
		}
		want := []string{"resume ops pipeline=docs&stage=fetch ", "pause ops pipeline=docs&stage=fetch the API is down"}
		if !slices.Equal(kinds, want) {
			t.Errorf("audit log = %q, want %q", kinds, want)
		}
	})
}

func pausedKeys(t *testing.T, s redrive.Store) []redrive.StageKey {
	t.Helper()
	ps, err := s.PausedStages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []redrive.StageKey
	for _, p := range ps {
		out = append(out, redrive.StageKey{Pipeline: p.Pipeline, Stage: p.Stage})
	}
	return out
}
