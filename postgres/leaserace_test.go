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

// The rescuer takes over expired leases while their late handlers'
// completions arrive. Its statement reaches the rows its walk locked by
// their addresses, so each item must end with exactly one owner: either
// the late completion applied (and the rescuer, finding the item
// succeeded, left it) or the rescuer took the lease (and the completion,
// its token stale, did not apply). Never both, never neither.
func TestClaimExpiredRacingLateCompletions(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.NewSchema(t)
	s := pgtest.OpenStoreAt(t, url, schema)
	ctx := context.Background()
	t0 := time.Now()
	run, _, err := s.CreateRun(ctx, "rescue", redrive.RunOptions{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	const items, batch = 3000, 100
	if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "rescue", Stage: "a",
		Items: make([]redrive.NewItem, items), Now: t0}); err != nil {
		t.Fatal(err)
	}
	var leases []redrive.Lease
	for len(leases) < items {
		ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "late", Pipelines: []string{"rescue"}, Limit: 1000, Now: t0, LeaseUntil: t0.Add(time.Minute)})
		if err != nil || len(ls) == 0 {
			t.Fatalf("claim: %d leases, %v", len(ls), err)
		}
		leases = append(leases, ls...)
	}
	// Completions in a shuffled order, so that they meet the rescuer's
	// walk (oldest lease first, then by ID) everywhere.
	rng := rand.New(rand.NewPCG(7, 21))
	rng.Shuffle(len(leases), func(i, j int) { leases[i], leases[j] = leases[j], leases[i] })
	later := t0.Add(2 * time.Minute)
	var (
		wg        sync.WaitGroup
		completed = map[int64]bool{}
		rescued   = map[int64]bool{}
	)
	errs := make(chan error, 2)
	wg.Go(func() {
		for i := 0; i < len(leases); i += batch {
			var cs []redrive.Completion
			for _, l := range leases[i:min(len(leases), i+batch)] {
				cs = append(cs, done(l, redrive.StateSucceeded, later))
			}
			ok, err := s.Complete(ctx, cs)
			if err != nil {
				errs <- err
				return
			}
			for j, applied := range ok {
				if applied {
					completed[cs[j].ItemID] = true
				}
			}
		}
	})
	wg.Go(func() {
		for {
			ls, err := s.ClaimExpired(ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"rescue"}, Limit: batch,
				Now: later, LeaseUntil: later.Add(time.Hour)})
			if err != nil {
				errs <- err
				return
			}
			if len(ls) == 0 {
				return
			}
			for _, l := range ls {
				if rescued[l.Item.ID] {
					errs <- fmt.Errorf("item %d rescued twice", l.Item.ID)
					return
				}
				rescued[l.Item.ID] = true
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The rescuer stops at its first empty batch; items whose completion
	// had not yet run then are rescued now, and their completions, which
	// ran since, must not have applied.
	rest, err := s.ClaimExpired(ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"rescue"}, Limit: items,
		Now: later, LeaseUntil: later.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range rest {
		rescued[l.Item.ID] = true
	}
	for _, l := range leases {
		id := l.Item.ID
		switch {
		case completed[id] && rescued[id]:
			t.Errorf("item %d: the late completion applied and the rescuer took its lease too", id)
		case !completed[id] && !rescued[id]:
			t.Errorf("item %d: neither completed nor rescued", id)
		}
	}
	var succeeded, running int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FILTER (WHERE state = 'pending' AND lease_expires_at IS NOT NULL AND lease_owner = 'rescuer')
		FROM `+pgx.Identifier{schema, "items"}.Sanitize()).Scan(&succeeded, &running); err != nil {
		t.Fatal(err)
	}
	if succeeded != len(completed) || running != len(rescued) {
		t.Errorf("store: %d succeeded, %d running under the rescuer; the calls said %d completed, %d rescued",
			succeeded, running, len(completed), len(rescued))
	}
	t.Logf("%d completed late, %d rescued", len(completed), len(rescued))
}
