package postgres_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// TestRunCountsFollowTheItems: the claim and the completion write their
// own run_counts rows (runcounts.go) while every other statement leaves
// them to the trigger. Through a seeded mix of everything that moves
// items (claims of two runs; completions to succeeded, to the next stage,
// to a retry later, to dead and to canceled, in one batch, with stale and
// repeated tokens among them; releases, heartbeats, rescues of expired
// leases, redrives and cancels), each run's counts must equal its items
// counted by state after every step, a leased pending item as running.
func TestRunCountsFollowTheItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	runs := []redrive.Run{mustRun(t, s, "p"), mustRun(t, s, "q")}
	for _, r := range runs {
		items := make([]redrive.NewItem, 150)
		enqueue(t, s, r, items...)
	}
	rng := rand.New(rand.NewPCG(21, 5))
	now := t0
	check := func(step string) {
		t.Helper()
		for _, r := range runs {
			got, err := s.GetRun(ctx, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			want := itemsByState(t, s, r.ID)
			want.Total = got.Counts.Total // the items' number, checked below
			if got.Counts != want {
				t.Fatalf("%s: run %d counts %+v; its items %+v", step, r.ID, got.Counts, want)
			}
			if !got.Counts.AddsUp() || got.Counts.Total != 150 {
				t.Fatalf("%s: run %d counts %+v do not add up to its 150 items", step, r.ID, got.Counts)
			}
		}
	}
	check("enqueued")
	var held []redrive.Lease // leases left running, for heartbeats and rescues
	for round := range 60 {
		now = now.Add(time.Second)
		ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "w", Pipelines: []string{"p", "q"}, Limit: 1 + rng.IntN(25),
			Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		check("claim")
		var cs []redrive.Completion
		var rel []redrive.LeaseRef
		for _, l := range ls {
			switch rng.IntN(9) {
			case 0:
				cs = append(cs, done(l, redrive.StateSucceeded, now))
			case 1: // to the next stage, due at once
				c := done(l, redrive.StateSucceeded, now)
				c.State, c.Stage, c.StageIndex, c.Attempt = redrive.StatePending, "b", 1, 0
				cs = append(cs, c)
			case 2: // a retry, due later
				c := done(l, redrive.StatePending, now)
				c.NextAt = now.Add(time.Duration(1+rng.IntN(5)) * time.Second)
				c.Record.Outcome, c.Record.Class = redrive.OutcomeRetry, "retryable"
				cs = append(cs, c)
			case 3:
				cs = append(cs, done(l, redrive.StateDead, now))
			case 4:
				cs = append(cs, done(l, redrive.StateCanceled, now))
			case 5: // a repeated completion, and one with a stale token
				c := done(l, redrive.StateSucceeded, now)
				stale := c
				stale.Token -= 2
				cs = append(cs, c, c, stale)
			case 6:
				rel = append(rel, l.Ref())
			default:
				held = append(held, l)
			}
		}
		rng.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
		if _, err := s.Complete(ctx, cs); err != nil {
			t.Fatal(err)
		}
		check("complete")
		if len(rel) > 0 {
			if rng.IntN(2) == 0 {
				err = s.Release(ctx, rel, now)
			} else {
				err = s.ReleaseUnstarted(ctx, rel, now)
			}
			if err != nil {
				t.Fatal(err)
			}
			check("release")
		}
		switch round % 10 {
		case 3:
			refs := make([]redrive.LeaseRef, len(held))
			for i, l := range held {
				refs[i] = l.Ref()
			}
			if _, err := s.Heartbeat(ctx, refs, now.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			check("heartbeat")
		case 6: // the held leases expire and are taken over, then completed
			later := now.Add(2 * time.Minute)
			taken, err := s.ClaimExpired(ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p", "q"},
				Limit: 1000, Now: later, LeaseUntil: later.Add(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			check("rescue")
			cs = cs[:0]
			for _, l := range taken {
				c := done(l, redrive.StatePending, later)
				c.Record.Outcome, c.Record.Class = redrive.OutcomeRetry, "retryable"
				cs = append(cs, c)
			}
			if _, err := s.Complete(ctx, cs); err != nil {
				t.Fatal(err)
			}
			held = held[:0]
			check("rescued completed")
		case 8:
			r := runs[rng.IntN(len(runs))]
			if _, err := s.Redrive(ctx, redrive.ItemFilter{RunID: r.ID, States: []redrive.State{redrive.StateDead}}, now, 0); err != nil {
				t.Fatal(err)
			}
			check("redrive")
			if _, err := s.CancelPending(ctx, redrive.ItemFilter{RunID: r.ID, Limit: 3},
				redrive.Reason{Class: "operator", Error: "canceled", At: now}); err != nil {
				t.Fatal(err)
			}
			check("cancel")
		}
	}
}

// itemsByState counts run's items by state from the items themselves, a
// leased pending item as running (leasestate.go).
func itemsByState(t *testing.T, s *postgres.Store, run int64) redrive.Counts {
	t.Helper()
	rows, err := s.Pool().Query(context.Background(), `SELECT CASE WHEN state = 'pending' AND lease_expires_at IS NOT NULL
		THEN 'running' ELSE state END, count(*) FROM `+pgx.Identifier{s.Schema(), "items"}.Sanitize()+` WHERE run_id = $1 GROUP BY 1`, run)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var c redrive.Counts
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			t.Fatal(err)
		}
		switch redrive.State(st) {
		case redrive.StatePending:
			c.Pending = n
		case redrive.StateRunning:
			c.Running = n
		case redrive.StateSucceeded:
			c.Succeeded = n
		case redrive.StateDead:
			c.Dead = n
		case redrive.StateCanceled:
			c.Canceled = n
		default:
			t.Fatalf("item state %q", st)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return c
}
