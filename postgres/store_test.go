package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func mustRun(t testing.TB, s *postgres.Store, p string) redrive.Run {
	t.Helper()
	r, created, err := s.CreateRun(context.Background(), p, redrive.RunOptions{}, t0)
	if err != nil || !created {
		t.Fatalf("CreateRun: %v %v", created, err)
	}
	return r
}

func enqueue(t testing.TB, s *postgres.Store, run redrive.Run, items ...redrive.NewItem) []redrive.Enqueued {
	t.Helper()
	out, err := s.Enqueue(context.Background(), redrive.EnqueueRequest{RunID: run.ID, Pipeline: run.Pipeline,
		Stage: "a", Items: items, Now: t0})
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return out
}

func claim(t testing.TB, s *postgres.Store, p string, n int, now time.Time) []redrive.Lease {
	t.Helper()
	ls, err := s.Claim(context.Background(), redrive.ClaimRequest{Owner: "w", Pipelines: []string{p}, Limit: n,
		LeaseUntil: now.Add(time.Minute), Now: now})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return ls
}

func done(l redrive.Lease, state redrive.State, now time.Time) redrive.Completion {
	c := redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: state, Stage: l.Item.Stage,
		StageIndex: l.Item.StageIndex, Attempt: l.Item.Attempt + 1, NextAt: now, Now: now,
		Record: redrive.Attempt{Stage: l.Item.Stage, StageIndex: l.Item.StageIndex, Number: l.Item.Attempt + 1,
			Outcome: redrive.OutcomeSucceeded, StartedAt: now, FinishedAt: now}}
	if state != redrive.StateSucceeded {
		c.Record.Outcome, c.Record.Class, c.Record.Error = redrive.OutcomeDead, "final", "boom"
	}
	return c
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	run := mustRun(t, s, "p")
	again, created, err := s.CreateRun(ctx, "p", redrive.RunOptions{Name: "n"}, t0)
	if err != nil || !created {
		t.Fatal(err)
	}
	if r, created, err := s.CreateRun(ctx, "p", redrive.RunOptions{Name: "n"}, t0); err != nil || created || r.ID != again.ID {
		t.Fatalf("named run again: %v %v %v", r.ID, created, err)
	}

	res := enqueue(t, s, run,
		redrive.NewItem{Key: "k1", Payload: []byte("one")},
		redrive.NewItem{Key: "k2", Payload: []byte("two"), Priority: 5},
		redrive.NewItem{Key: "k1", Payload: []byte("dup")},
		redrive.NewItem{Payload: []byte("nokey")},
		redrive.NewItem{Payload: []byte("bad"), Invalid: "unreadable"},
	)
	if !res[2].Existing || res[2].ID != res[0].ID || res[0].Existing || res[3].Existing {
		t.Fatalf("enqueue results %+v", res)
	}
	res2 := enqueue(t, s, run, redrive.NewItem{Key: "k2"}, redrive.NewItem{Key: "k3"})
	if !res2[0].Existing || res2[0].ID != res[1].ID || res2[1].Existing {
		t.Fatalf("second enqueue %+v", res2)
	}
	bad, err := s.GetItem(ctx, res[4].ID)
	if err != nil || bad.State != redrive.StateDead || bad.Reason == nil || bad.Reason.Class != redrive.ClassInvalidInput ||
		bad.Reason.Error != "unreadable" || bad.Reason.Stage != "a" || !bad.Reason.At.Equal(t0) {
		t.Fatalf("invalid item %+v %v", bad, err)
	}
	if _, err := s.GetItem(ctx, 999999); !errors.Is(err, redrive.ErrNotFound) {
		t.Fatalf("GetItem missing: %v", err)
	}
	if _, err := s.GetRun(ctx, 999999); !errors.Is(err, redrive.ErrNotFound) {
		t.Fatalf("GetRun missing: %v", err)
	}

	ls := claim(t, s, "p", 2, t0)
	if len(ls) != 2 || ls[0].Item.ID != res[1].ID || ls[1].Item.ID != res[0].ID || ls[0].Token%2 != 1 || ls[1].Token != ls[0].Token {
		t.Fatalf("claim order %+v", ls)
	}
	if string(ls[1].Item.Payload) != "one" || ls[1].Item.State != redrive.StateRunning || ls[1].Item.LeaseOwner != "w" {
		t.Fatalf("claimed item %+v", ls[1].Item)
	}
	lost, err := s.Heartbeat(ctx, []redrive.LeaseRef{ls[0].Ref(), {ItemID: ls[1].Item.ID, Token: 99}}, t0.Add(time.Hour))
	if err != nil || len(lost) != 1 || lost[0] != ls[1].Item.ID {
		t.Fatalf("heartbeat lost %v %v", lost, err)
	}
	// Complete: one succeeds, one dies, one stale token.
	c0 := done(ls[0], redrive.StateSucceeded, t0.Add(time.Second))
	c0.Payload = []byte("out")
	c1 := done(ls[1], redrive.StateDead, t0.Add(time.Second))
	stale := c1
	stale.Token = 42
	applied, err := s.Complete(ctx, []redrive.Completion{c0, stale, c1})
	if err != nil || !applied[0] || applied[1] || !applied[2] {
		t.Fatalf("complete %v %v", applied, err)
	}
	it, _ := s.GetItem(ctx, ls[0].Item.ID)
	if it.State != redrive.StateSucceeded || string(it.Payload) != "out" || string(it.Input) != "two" || it.Reason != nil {
		t.Fatalf("succeeded item %+v", it)
	}
	it, _ = s.GetItem(ctx, ls[1].Item.ID)
	if it.State != redrive.StateDead || it.Reason == nil || it.Reason.Error != "boom" || it.Reason.Attempts != 1 {
		t.Fatalf("dead item %+v", it)
	}
	as, err := s.Attempts(ctx, it.ID)
	if err != nil || len(as) != 1 || as[0].RunID != run.ID || as[0].Pipeline != "p" || as[0].Outcome != redrive.OutcomeDead {
		t.Fatalf("attempts %+v %v", as, err)
	}

	// Release and claim expired.
	ls = claim(t, s, "p", 10, t0)
	if len(ls) != 2 {
		t.Fatalf("claimed %d", len(ls))
	}
	if err := s.Release(ctx, []redrive.LeaseRef{ls[0].Ref()}, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if d, err := s.OldestDue(ctx, t0.Add(time.Hour)); err != nil || !d.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("OldestDue %v %v", d, err)
	}
	if d, err := s.OldestDue(ctx, t0); err != nil || !d.IsZero() {
		t.Fatalf("OldestDue none %v %v", d, err)
	}
	exp, err := s.ClaimExpired(ctx, redrive.ClaimRequest{Owner: "r", Pipelines: []string{"p"}, Limit: 10,
		LeaseUntil: t0.Add(time.Hour), Now: t0.Add(2 * time.Minute)})
	if err != nil || len(exp) != 1 || exp[0].Item.ID != ls[1].Item.ID || exp[0].Token%2 != 1 || exp[0].Token <= ls[1].Token {
		t.Fatalf("ClaimExpired %+v %v", exp, err)
	}
	if a, _ := s.Complete(ctx, []redrive.Completion{done(ls[1], redrive.StateSucceeded, t0)}); a[0] {
		t.Fatal("stale lease completed after rescue")
	}
	if a, _ := s.Complete(ctx, []redrive.Completion{done(exp[0], redrive.StateSucceeded, t0.Add(3*time.Minute))}); !a[0] {
		t.Fatal("rescuer's completion did not apply")
	}

	// Cancel the rest, then redrive dead and canceled.
	n, err := s.CancelPending(ctx, redrive.ItemFilter{RunID: run.ID}, redrive.Reason{Class: redrive.ClassCanceled, Error: "abort", At: t0.Add(time.Hour)})
	if err != nil || n != 1 {
		t.Fatalf("CancelPending %d %v", n, err)
	}
	if err := s.SetRunStatus(ctx, run.ID, redrive.RunAborted, "budget", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	r, err := s.GetRun(ctx, run.ID)
	if err != nil || r.Status != redrive.RunAborted || r.Reason != "budget" || !r.FinishedAt.Equal(t0.Add(time.Hour)) ||
		r.Counts != (redrive.Counts{Total: 5, Succeeded: 2, Dead: 2, Canceled: 1}) {
		t.Fatalf("run %+v %v", r, err)
	}
	if c, err := s.Count(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}, ErrorContains: "oo"}); err != nil || c != 1 {
		t.Fatalf("Count %d %v", c, err)
	}
	if _, err := s.Redrive(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StatePending}}, t0, 0); err == nil {
		t.Fatal("redrive of pending accepted")
	}
	n, err = s.Redrive(ctx, redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StateDead, redrive.StateCanceled}},
		t0.Add(2*time.Hour), time.Second)
	if err != nil || n != 3 {
		t.Fatalf("Redrive %d %v", n, err)
	}
	items, err := s.ListItems(ctx, redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StatePending}})
	if err != nil || len(items) != 3 {
		t.Fatalf("ListItems %d %v", len(items), err)
	}
	for i, it := range items {
		if !it.NextAt.Equal(t0.Add(2*time.Hour+time.Duration(i)*time.Second)) || it.Reason != nil || it.Attempt != 0 {
			t.Fatalf("redriven item %d %+v", i, it)
		}
	}
	r, _ = s.GetRun(ctx, run.ID)
	if r.Status != redrive.RunRunning || !r.FinishedAt.IsZero() || r.Reason != "" {
		t.Fatalf("run not reopened %+v", r)
	}
	runs, err := s.ListRuns(ctx, redrive.RunFilter{Pipeline: "p"})
	if err != nil || len(runs) != 2 || runs[0].ID != again.ID || runs[1].Counts.Total != 5 {
		t.Fatalf("ListRuns %+v %v", runs, err)
	}
	hist, err := s.RetryHistogram(ctx, run.ID)
	if err != nil || len(hist) != 1 || hist[0] != (redrive.HistogramBucket{Retries: 0, Items: 2}) {
		t.Fatalf("histogram %+v %v", hist, err)
	}
	top, err := s.TopErrors(ctx, redrive.ErrorFilter{RunID: run.ID})
	if err != nil || len(top) != 1 || top[0].Count != 1 || top[0].Error != "boom" {
		t.Fatalf("TopErrors %+v %v", top, err)
	}
	sc, err := s.StateCounts(ctx, run.ID)
	if err != nil || len(sc) != 2 {
		t.Fatalf("StateCounts %+v %v", sc, err)
	}
	if n, err := s.DeleteSucceeded(ctx, t0.Add(time.Hour), 1); err != nil || n != 1 {
		t.Fatalf("DeleteSucceeded %d %v", n, err)
	}
	// Kill the pending ones and purge them.
	ls = claim(t, s, "p", 10, t0.Add(3*time.Hour))
	var cs []redrive.Completion
	for _, l := range ls {
		cs = append(cs, done(l, redrive.StateDead, t0.Add(3*time.Hour)))
	}
	if _, err := s.Complete(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Purge(ctx, redrive.ItemFilter{RunID: run.ID}); err != nil || n != 3 {
		t.Fatalf("Purge %d %v", n, err)
	}
	if err := s.SetRunStatus(ctx, 12345678, redrive.RunCompleted, "", t0); !errors.Is(err, redrive.ErrNotFound) {
		t.Fatalf("SetRunStatus missing: %v", err)
	}
}

func TestClaimFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	run := mustRun(t, s, "p")
	enqueue(t, s, run, redrive.NewItem{}, redrive.NewItem{})
	ls := claim(t, s, "p", 1, t0)
	c := done(ls[0], redrive.StatePending, t0)
	c.Stage, c.StageIndex, c.Attempt = "b", 1, 0
	if _, err := s.Complete(ctx, []redrive.Completion{c}); err != nil {
		t.Fatal(err)
	}
	req := redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 10, Now: t0, LeaseUntil: t0.Add(time.Minute),
		Only: []redrive.StageKey{{Pipeline: "p", Stage: "b"}}}
	got, err := s.Claim(ctx, req)
	if err != nil || len(got) != 1 || got[0].Item.Stage != "b" {
		t.Fatalf("Only %+v %v", got, err)
	}
	req.Only, req.Exclude = nil, []redrive.StageKey{{Pipeline: "p", Stage: "a"}}
	if got, err := s.Claim(ctx, req); err != nil || len(got) != 0 {
		t.Fatalf("Exclude %+v %v", got, err)
	}
	req.Exclude = nil
	if got, err := s.Claim(ctx, req); err != nil || len(got) != 1 || got[0].Item.Stage != "a" {
		t.Fatalf("no filter %+v %v", got, err)
	}
	req.Pipelines = nil
	if got, err := s.Claim(ctx, req); err != nil || len(got) != 0 {
		t.Fatalf("no pipelines %+v %v", got, err)
	}
}

// Concurrent claimers never get the same item.
func TestConcurrentClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	run := mustRun(t, s, "p")
	items := make([]redrive.NewItem, 2000)
	enqueue(t, s, run, items...)
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ls, err := s.Claim(ctx, redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 37, Now: t0, LeaseUntil: t0.Add(time.Minute)})
				if err != nil {
					t.Error(err)
					return
				}
				if len(ls) == 0 {
					return
				}
				mu.Lock()
				for _, l := range ls {
					if seen[l.Item.ID] {
						t.Errorf("item %d claimed twice", l.Item.ID)
					}
					seen[l.Item.ID] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != len(items) {
		t.Fatalf("claimed %d of %d", len(seen), len(items))
	}
}

func TestSchemaIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.OpenStore(t), pgtest.OpenStore(t)
	ra := mustRun(t, a, "p")
	enqueue(t, a, ra, redrive.NewItem{Key: "x"})
	if n, err := b.Count(ctx, redrive.ItemFilter{}); err != nil || n != 0 {
		t.Fatalf("b sees %d items (%v)", n, err)
	}
	rb := mustRun(t, b, "p")
	if res := enqueue(t, b, rb, redrive.NewItem{Key: "x"}); res[0].Existing {
		t.Fatal("key of schema a existed in schema b")
	}
	if a.Channel() == b.Channel() {
		t.Fatal("schemas share a notification channel")
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.NewSchema(t)
	s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.MigrationStatus(ctx)
	if err != nil || len(st) == 0 || st[0].Applied {
		t.Fatalf("status before %+v %v", st, err)
	}
	// Concurrent migrators, then again: idempotent.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s2, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, Migrate: true, MaxConns: 1})
			if err != nil {
				errs <- err
				return
			}
			s2.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent migrate: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = s.MigrationStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st {
		if !m.Applied || m.AppliedAt.IsZero() {
			t.Fatalf("not applied: %+v", m)
		}
	}
	var n int
	if err := s.Pool().QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.schema_migrations`, schema)).Scan(&n); err != nil || n != len(st) {
		t.Fatalf("schema_migrations rows %d %v", n, err)
	}
}

func TestEnqueueTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	for _, commit := range []bool{true, false} {
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		run, _, err := s.CreateRunTx(ctx, tx, "p", redrive.RunOptions{}, t0)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.EnqueueTx(ctx, tx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a",
			Items: []redrive.NewItem{{Key: "a"}, {Key: "b"}}, Now: t0})
		if err != nil || len(res) != 2 {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		n, err := s.Count(ctx, redrive.ItemFilter{RunID: run.ID})
		if err != nil {
			t.Fatal(err)
		}
		_, rerr := s.GetRun(ctx, run.ID)
		if commit && (n != 2 || rerr != nil) || !commit && (n != 0 || !errors.Is(rerr, redrive.ErrNotFound)) {
			t.Fatalf("commit=%v: %d items, run err %v", commit, n, rerr)
		}
	}
}

func waitNote(t *testing.T, ch <-chan struct{}, d time.Duration) bool {
	t.Helper()
	select {
	case _, ok := <-ch:
		return ok
	case <-time.After(d):
		return false
	}
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func TestNotify(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, schema := pgtest.NewSchema(t)
	listener := pgtest.OpenStoreAt(t, url, schema)
	other := pgtest.OpenStoreAt(t, url, schema)
	ch := listener.Notifications(ctx)
	// Wait for the listener to be up: notifications keep coming while
	// we enqueue until one arrives.
	run := mustRun(t, other, "p")
	deadline := time.Now().Add(30 * time.Second)
	for {
		enqueue(t, other, run, redrive.NewItem{})
		if waitNote(t, ch, 200*time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no notification after Enqueue")
		}
	}
	drain(ch)
	enqueue(t, other, run, redrive.NewItem{})
	if !waitNote(t, ch, 5*time.Second) {
		t.Fatal("no notification after a second Enqueue")
	}
	cancel()
	for range ch {
	}
}

// Killing the store's connections costs at most one error per call in
// flight; the pool reconnects and the listener resumes.
func TestConnectionKill(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, schema := pgtest.NewSchema(t)
	// Tag the victim's connections so that we kill only those.
	app := "victim_" + schema
	s := pgtest.OpenStoreAt(t, url+sep(url)+"application_name="+app, schema)
	admin := pgtest.OpenStoreAt(t, url, schema)
	ch := s.Notifications(ctx)
	run := mustRun(t, admin, "p")
	for deadline := time.Now().Add(30 * time.Second); ; {
		enqueue(t, admin, run, redrive.NewItem{})
		if waitNote(t, ch, 200*time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("listener never came up")
		}
	}
	// Warm several pool connections.
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); s.Count(ctx, redrive.ItemFilter{}) }()
	}
	wg.Wait()
	var killed int
	err := admin.Pool().QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = $1`, app).Scan(&killed)
	if err != nil || killed < 2 {
		t.Fatalf("terminate: %d %v", killed, err)
	}
	drain(ch)
	errs := 0
	for i := 0; i < 10; i++ {
		if _, err := s.Count(ctx, redrive.ItemFilter{}); err != nil {
			errs++
			if !postgres.IsTransient(err) {
				t.Errorf("error not transient: %v", err)
			}
		}
	}
	if errs > 1 {
		t.Fatalf("%d errors after the kill, want at most 1", errs)
	}
	// The listener reconnects and notifications resume.
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := admin.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Items: []redrive.NewItem{{}}, Now: t0})
		if err == nil && waitNote(t, ch, 300*time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("notifications did not resume (last error %v)", err)
		}
	}
}

func sep(url string) string {
	if strings.Contains(url, "?") {
		return "&"
	}
	return "?"
}

// TestTokenFencesFinishedItems checks that tokens that were never handed
// out (the token a completion or release leaves behind, and an unclaimed
// item's 0) apply to nothing: fencing needs no condition on the state.
func TestTokenFencesFinishedItems(t *testing.T) {
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a",
		Items: []redrive.NewItem{{Key: "x"}, {Key: "y"}, {Key: "z"}}, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "o", Pipelines: []string{"p"}, Limit: 2, LeaseUntil: t0.Add(time.Minute), Now: t0})
	if err != nil || len(ls) != 2 {
		t.Fatalf("claim %v %v", ls, err)
	}
	done := func(id, token int64) redrive.Completion {
		return redrive.Completion{ItemID: id, Token: token, State: redrive.StateSucceeded, Stage: "a", Now: t0,
			Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: redrive.OutcomeSucceeded, StartedAt: t0, FinishedAt: t0}}
	}
	if ap, err := s.Complete(ctx, []redrive.Completion{done(ls[0].Item.ID, ls[0].Token)}); err != nil || !ap[0] {
		t.Fatalf("complete %v %v", ap, err)
	}
	if err := s.Release(ctx, []redrive.LeaseRef{ls[1].Ref()}, t0); err != nil {
		t.Fatal(err)
	}
	unclaimed := res[2].ID
	for _, id := range []int64{ls[0].Item.ID, ls[1].Item.ID} {
		it, err := s.GetItem(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		// The token left behind is the lease's + 1; forge it.
		forged := ls[0].Token + 1
		if id == ls[1].Item.ID {
			forged = ls[1].Token + 1
		}
		if lost, err := s.Heartbeat(ctx, []redrive.LeaseRef{{ItemID: id, Token: forged}}, t0.Add(time.Hour)); err != nil || len(lost) != 1 {
			t.Fatalf("heartbeat with forged token on %s item: lost %v %v", it.State, lost, err)
		}
		if ap, err := s.Complete(ctx, []redrive.Completion{done(id, forged)}); err != nil || ap[0] {
			t.Fatalf("forged completion of %s item applied: %v %v", it.State, ap, err)
		}
	}
	if ap, err := s.Complete(ctx, []redrive.Completion{done(unclaimed, 0)}); err != nil || ap[0] {
		t.Fatalf("token 0 completion of an unclaimed item applied: %v %v", ap, err)
	}
	r, err := s.GetRun(ctx, run.ID)
	if err != nil || r.Counts.Succeeded != 1 || r.Counts.Pending != 2 || r.Counts.Total != 3 {
		t.Fatalf("counts %+v %v", r.Counts, err)
	}
}
