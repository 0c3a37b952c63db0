package redrive_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/sqlite"
)

// fast is a policy for tests: real backoff, tiny delays.
func fast(attempts int) retry.Policy {
	return retry.Policy{MaxAttempts: attempts, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, JitterMode: retry.JitterNone}
}

// eachStore runs test on a fresh SQLite store and a fresh PostgreSQL
// store (a schema of its own on the test server).
func eachStore(t *testing.T, test func(t *testing.T, s redrive.Store)) {
	t.Run("sqlite", func(t *testing.T) { test(t, openStore(t)) })
	t.Run("postgres", func(t *testing.T) { test(t, pgtest.OpenStore(t)) })
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// recorder collects events.
type recorder struct {
	mu     sync.Mutex
	events []redrive.Event
}

func (r *recorder) observe(e redrive.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) count(match func(redrive.Event) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if match(e) {
			n++
		}
	}
	return n
}

func testConfig(rec *recorder) redrive.Config {
	cfg := redrive.Config{Workers: 8, PollInterval: 5 * time.Millisecond, RunCheckInterval: 10 * time.Millisecond,
		LeaseDuration: 5 * time.Second, RescueInterval: 50 * time.Millisecond}
	if rec != nil {
		cfg.Observers = []func(redrive.Event){rec.observe}
	}
	return cfg
}

// startClient registers p on a fresh store, starts the client and stops it
// at the end of the test.
func startClient(t *testing.T, s redrive.Store, cfg redrive.Config, ps ...redrive.Pipeline) *redrive.Client {
	t.Helper()
	c := redrive.NewClient(s, cfg)
	for _, p := range ps {
		if err := c.Register(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

func items(n int) []redrive.NewItem {
	out := make([]redrive.NewItem, n)
	for i := range out {
		b, _ := json.Marshal(map[string]int{"n": i})
		out[i] = redrive.NewItem{Payload: b}
	}
	return out
}

func wait(t *testing.T, c *redrive.Client, run redrive.Run) redrive.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := c.WaitRun(ctx, run.ID)
	if err != nil {
		t.Fatalf("wait for run %d: %v (counts %+v)", run.ID, err, r.Counts)
	}
	checkCounts(t, r.Counts)
	return r
}

func checkCounts(t *testing.T, c redrive.Counts) {
	t.Helper()
	if !c.AddsUp() {
		t.Fatalf("counts do not add up: %+v", c)
	}
}
