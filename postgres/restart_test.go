package postgres_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// A server restart in the middle of work costs errors, not items: the
// claim/complete loops carry on after it and every item ends succeeded.
func TestServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	t.Parallel()
	url, restart, _ := pgtest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := postgres.Open(ctx, url, postgres.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	notes := s.Notifications(ctx)
	run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const total = 20000
	items := make([]redrive.NewItem, total)
	if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Items: items, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var completed, errCount atomic.Int64
	work := func(ls []redrive.Lease) {
		now := time.Now()
		cs := make([]redrive.Completion, len(ls))
		for i, l := range ls {
			cs[i] = redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StateSucceeded, Stage: "a",
				Attempt: 1, Now: now, Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: redrive.OutcomeSucceeded,
					StartedAt: now, FinishedAt: now}}
		}
		applied, err := s.Complete(ctx, cs)
		if err != nil {
			errCount.Add(1)
			return
		}
		for _, a := range applied {
			if a {
				completed.Add(1)
			}
		}
	}
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && completed.Load() < total {
				now := time.Now()
				req := redrive.ClaimRequest{Owner: "w", Pipelines: []string{"p"}, Limit: 100, Now: now,
					LeaseUntil: now.Add(2 * time.Second)}
				ls, err := s.Claim(ctx, req)
				if err == nil && len(ls) == 0 {
					// Claims whose answer was lost in the restart hold
					// running items until their lease expires.
					ls, err = s.ClaimExpired(ctx, req)
				}
				if err != nil {
					errCount.Add(1)
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if len(ls) == 0 {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				work(ls)
			}
		}()
	}
	for completed.Load() < total/5 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	before := completed.Load()
	drain(notes)
	restart()
	t.Logf("restarted after %d completions", before)
	// Enqueue after the restart (retrying until the pool reconnected) and
	// expect the listener to wake us.
	for {
		_, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Items: []redrive.NewItem{{Key: "after"}}, Now: time.Now()})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("enqueue after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !waitNote(t, notes, 15*time.Second) {
		t.Error("no notification after the restart")
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("timed out: %d of %d completed", completed.Load(), total)
	}
	// The extra item may still be pending; count the originals.
	var r redrive.Run
	for deadline := time.Now().Add(30 * time.Second); ; {
		if r, err = s.GetRun(ctx, run.ID); err == nil && r.Counts.Succeeded >= total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %+v %v", r.Counts, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.Counts.Total != total+1 || r.Counts.Succeeded+r.Counts.Pending+r.Counts.Running != r.Counts.Total {
		t.Fatalf("counts %+v", r.Counts)
	}
	t.Logf("%d errors survived; counts %+v", errCount.Load(), r.Counts)
}
