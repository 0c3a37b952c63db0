package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// ownDatabase creates a database of the test's own and returns its URL, so
// that the server's per-database statistics count only the test's work. It
// is dropped when the test ends.
func ownDatabase(t *testing.T) string {
	t.Helper()
	base := pgtest.URL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	name := pgtest.SchemaName(t)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// deadlocks returns pg_stat_database.deadlocks of the database at dbURL once
// every other session of that database has ended (a session reports its
// statistics at the latest when it ends).
func deadlocks(t *testing.T, dbURL string) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var others int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others); err != nil {
			t.Fatal(err)
		}
		if others == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions of the test database did not end", others)
		}
		time.Sleep(20 * time.Millisecond) // polls a condition, with a deadline
	}
	var n int64
	if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Heartbeats and completions of many workers update the same items at the
// same time, each naming them in its own order (a map's order, a batch's
// order). They must lock the rows in one order, or they deadlock each
// other; the server then aborts one of them, and the engine has to repeat
// the call. The test runs them against each other until 20,000
// completions have applied, and checks that no call failed with a
// deadlock and that the database counted none.
func TestHeartbeatAndCompleteDoNotDeadlock(t *testing.T) {
	dbURL := ownDatabase(t)
	before := deadlocks(t, dbURL)
	s, err := postgres.Open(context.Background(), dbURL, postgres.Options{Schema: "redrive", Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	run, _, err := s.CreateRun(ctx, "lock", redrive.RunOptions{}, now)
	if err != nil {
		t.Fatal(err)
	}
	in := make([]redrive.NewItem, 2000)
	for i := range in {
		in[i] = redrive.NewItem{Payload: fmt.Appendf(nil, "%d", i)}
	}
	if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "lock", Stage: "a", Items: in, Now: now}); err != nil {
		t.Fatal(err)
	}

	// The run ends after target completions, or at the deadline: a
	// deadlock costs the server's deadlock_timeout (1 s) each time, and the
	// check below fails on the first one anyway.
	const target = 4000
	deadline := time.Now().Add(60 * time.Second)
	var (
		mu        sync.Mutex
		held      = map[redrive.LeaseRef]bool{}
		completed atomic.Int64
		locked    atomic.Int64 // calls that failed with a deadlock
		failed    = make(chan error, 16)
	)
	done := func() bool { return completed.Load() >= target || len(failed) > 0 || time.Now().After(deadline) }
	check := func(op string, err error) {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "40P01" {
			locked.Add(1)
			return
		}
		if err != nil {
			select {
			case failed <- fmt.Errorf("%s: %w", op, err):
			default:
			}
		}
	}
	shuffle := func(rng *rand.Rand, refs []redrive.LeaseRef) {
		rng.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() { // heartbeats of every lease held, in a random order
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for !done() {
				mu.Lock()
				refs := make([]redrive.LeaseRef, 0, len(held))
				for r := range held {
					refs = append(refs, r)
				}
				mu.Unlock()
				shuffle(rng, refs)
				_, err := s.Heartbeat(ctx, refs, time.Now().Add(time.Hour))
				check("heartbeat", err)
			}
		})
		wg.Go(func() { // claims a batch, completes it in a random order, back to pending
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for !done() {
				at := time.Now()
				ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "w", Pipelines: []string{"lock"}, Limit: 64, Now: at, LeaseUntil: at.Add(time.Hour)})
				check("claim", err)
				refs := make([]redrive.LeaseRef, len(ls))
				stageOf := make(map[int64]int, len(ls))
				mu.Lock()
				for i, l := range ls {
					refs[i] = l.Ref()
					held[refs[i]] = true
					stageOf[l.Item.ID] = l.Item.StageIndex
				}
				mu.Unlock()
				shuffle(rng, refs)
				at = time.Now()
				cs := make([]redrive.Completion, len(refs))
				for i, r := range refs {
					cs[i] = redrive.Completion{ItemID: r.ItemID, Token: r.Token, State: redrive.StatePending, Stage: "a",
						NextAt: at, Now: at, Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: redrive.OutcomeRetry,
							StartedAt: at, FinishedAt: at}}
					if rng.IntN(2) == 0 {
						// A success that moves the item on a stage: the
						// batch's successes below its first retry in ID
						// order go in the success statement, the rest in
						// the full one, in one transaction.
						cs[i].StageIndex = stageOf[r.ItemID] + 1
						cs[i].Record.StageIndex, cs[i].Record.Outcome = stageOf[r.ItemID], redrive.OutcomeSucceeded
					}
				}
				applied, err := s.Complete(ctx, cs)
				check("complete", err)
				mu.Lock()
				for _, r := range refs {
					delete(held, r)
				}
				mu.Unlock()
				for _, ok := range applied {
					if ok {
						completed.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Fatal(err)
	}
	s.Close()
	after := deadlocks(t, dbURL)
	t.Logf("%d completions; %d calls failed with a deadlock; pg_stat_database.deadlocks %d -> %d", completed.Load(), locked.Load(), before, after)
	if locked.Load() > 0 || after != before {
		t.Fatalf("%d calls failed with a deadlock; the database counted %d deadlocks: heartbeats and completions lock rows in different orders",
			locked.Load(), after-before)
	}
}
