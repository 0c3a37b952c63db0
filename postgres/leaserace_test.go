package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
)

// A completion, a heartbeat and a start mark of the same lease run at the
// same time whenever a handler ends: the completer writes its result
// while the heartbeat loop extends every lease held and the mark loop
// records starts. Each of them updates the item's row, so each may find
// the row updated by another since its statement began; PostgreSQL then
// rechecks the statement's conditions on the newest version. Those
// conditions must hold there: a completion whose lease is current must
// apply (else the result is lost and the rescuer runs the item again),
// and a heartbeat or start mark must report lost only leases that ended.
// (Conditions on a row's physical address, its ctid, fail on every newer
// version: such a statement skips the row.)
func TestLeaseWritesRacingOnOneItemAllApply(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.NewSchema(t)
	s := pgtest.OpenStoreAt(t, url, schema)
	ctx := context.Background()
	now := time.Now()
	run, _, err := s.CreateRun(ctx, "race", redrive.RunOptions{}, now)
	if err != nil {
		t.Fatal(err)
	}
	const items, batch = 1500, 150
	in := make([]redrive.NewItem, items)
	for i := range in {
		in[i] = redrive.NewItem{Payload: fmt.Appendf(nil, "%d", i)}
	}
	if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "race", Stage: "a", Items: in, Now: now}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(21, 1))
	var heartbeats, marks int
	for done := 0; done < items; {
		at := time.Now()
		ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "w", Pipelines: []string{"race"}, Limit: batch, Now: at, LeaseUntil: at.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 0 {
			t.Fatalf("%d of %d items completed, none left to claim", done, items)
		}
		refs := make([]redrive.LeaseRef, len(ls))
		for i, l := range ls {
			refs[i] = l.Ref()
		}
		// ending holds the leases whose completion has been sent: only
		// those may be reported lost.
		var mu sync.Mutex
		ending := map[redrive.LeaseRef]bool{}
		mayBeLost := func(op string, lost []int64) error {
			mu.Lock()
			defer mu.Unlock()
			for _, id := range lost {
				for _, r := range refs {
					if r.ItemID == id && !ending[r] {
						return fmt.Errorf("%s reported the lease of item %d lost, which nothing ended", op, id)
					}
				}
			}
			return nil
		}
		stop := make(chan struct{})
		errs := make(chan error, 3)
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-stop:
						if w == 0 {
							heartbeats += n
						}
						return
					default:
					}
					lost, err := s.Heartbeat(ctx, refs, time.Now().Add(time.Hour))
					if err == nil {
						err = mayBeLost("heartbeat", lost)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					marks += n
					return
				default:
				}
				ms := make([]redrive.StartMark, len(refs))
				for i, r := range refs {
					ms[i] = redrive.StartMark{Lease: r, At: time.Now()}
				}
				lost, err := s.MarkStarted(ctx, ms)
				if err == nil {
					err = mayBeLost("start mark", lost)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
		// Complete the leases in small random batches while the others
		// write to the same rows.
		order := rng.Perm(len(refs))
		for len(order) > 0 {
			k := min(len(order), 1+rng.IntN(20))
			cs := make([]redrive.Completion, k)
			mu.Lock()
			for i, j := range order[:k] {
				r := refs[j]
				ending[r] = true
				at := time.Now()
				cs[i] = redrive.Completion{ItemID: r.ItemID, Token: r.Token, State: redrive.StateSucceeded, Stage: "a", Attempt: 1, Now: at,
					Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: redrive.OutcomeSucceeded, StartedAt: at, FinishedAt: at}}
			}
			mu.Unlock()
			order = order[k:]
			applied, err := s.Complete(ctx, cs)
			if err != nil {
				t.Fatal(err)
			}
			for i, ok := range applied {
				if !ok {
					close(stop)
					wg.Wait()
					t.Fatalf("the completion of item %d (token %d) was not applied, though its lease was current", cs[i].ItemID, cs[i].Token)
				}
			}
			done += k
		}
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	if heartbeats == 0 || marks == 0 {
		t.Fatalf("%d heartbeats and %d start marks raced the completions; the test needs both", heartbeats, marks)
	}
	var succeeded int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema}.Sanitize()+`.items WHERE state = 'succeeded'`).Scan(&succeeded); err != nil {
		t.Fatal(err)
	}
	if succeeded != items {
		t.Fatalf("%d items succeeded, want %d", succeeded, items)
	}
	t.Logf("%d items completed while %d heartbeats and %d start marks of the same leases ran", items, heartbeats, marks)
}
