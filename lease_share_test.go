package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry"
)

// Two processes started 150 ms apart share 30 items: the first leases only
// what its workers can start soon, so the second finds work within a
// second. (With a prefetch of two claim batches, the first took 28 of 30
// and the second none.)
func TestSecondProcessSharesTheWork(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		var mu sync.Mutex
		ran := map[string]int{}
		var secondStarted time.Time
		var secondFirst time.Duration
		pipeline := func(owner string) redrive.Pipeline {
			return redrive.Pipeline{Name: "share", Stages: []redrive.Stage{{Name: "s", Policy: fast(1),
				Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
					mu.Lock()
					ran[owner]++
					if owner == "second" && secondFirst == 0 {
						secondFirst = time.Since(secondStarted)
					}
					mu.Unlock()
					t := time.NewTimer(100 * time.Millisecond)
					defer t.Stop()
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-t.C:
					}
					return it.Payload, nil
				}}}}
		}
		cfg := testConfig(nil)
		cfg.Workers, cfg.Owner = 4, "first"
		first := startClient(t, s, cfg, pipeline("first"))
		run, err := first.StartRun(ctx, "share", items(30), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the first process to start", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return ran["first"] > 0
		})
		time.Sleep(150 * time.Millisecond) // the second process starts later, as in a deploy
		mu.Lock()
		secondStarted = time.Now()
		mu.Unlock()
		cfg.Owner = "second"
		startClient(t, s, cfg, pipeline("second"))
		r := wait(t, first, run)
		if r.Counts.Succeeded != 30 {
			t.Fatalf("counts %+v", r.Counts)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("first ran %d, second ran %d, its first item %v after it started", ran["first"], ran["second"], secondFirst)
		if ran["second"] == 0 || secondFirst > time.Second {
			t.Fatalf("the second process ran %d items, its first %v after it started; want work within a second", ran["second"], secondFirst)
		}
		if ran["second"] < 5 {
			t.Fatalf("the second process ran %d of 30 items; the first held the rest", ran["second"])
		}
	})
}

// OrderAt order holds across the queue, not only at claim time: an old
// item's retry that comes due runs before newer items that are still in
// the queue; only what the process had leased to start soon runs first.
// Counted from when the retry was written (the RetryScheduled event, sent
// once the store applied the failure): how long the write itself takes
// depends on the machine's load, and the worker goes on meanwhile.
func TestDueRetryOvertakesNewerItems(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		var mu sync.Mutex
		var order []int
		failed := false
		var firstID int64
		recorded := -1 // len(order) when the retry was written
		p := redrive.Pipeline{Name: "order", Stages: []redrive.Stage{{Name: "s",
			Policy: retry.Policy{MaxAttempts: 2, BaseDelay: time.Millisecond, JitterMode: retry.JitterNone},
			Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
				var in struct{ N int }
				_ = json.Unmarshal(it.Payload, &in)
				mu.Lock()
				order = append(order, in.N)
				first := in.N == 0 && !failed
				if first {
					firstID = it.ID
				}
				failed = failed || in.N == 0
				mu.Unlock()
				time.Sleep(30 * time.Millisecond) // the handler's work
				if first {
					return nil, errors.New("flaky once")
				}
				return it.Payload, nil
			}}}}
		cfg := testConfig(nil)
		cfg.Workers = 1
		cfg.Observers = append(cfg.Observers, func(ev redrive.Event) {
			if r, ok := ev.(redrive.RetryScheduled); ok {
				mu.Lock()
				if r.ItemID == firstID && recorded < 0 {
					recorded = len(order)
				}
				mu.Unlock()
			}
		})
		c := redrive.NewClient(s, cfg)
		if err := c.Register(p); err != nil {
			t.Fatal(err)
		}
		base := time.Now().Add(-time.Hour)
		in := items(40)
		for i := range in {
			in[i].OrderAt = base.Add(time.Duration(i) * time.Millisecond)
		}
		run, err := c.StartRun(ctx, "order", in, redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
		r := wait(t, c, run)
		if r.Counts.Succeeded != 40 {
			t.Fatalf("counts %+v", r.Counts)
		}
		mu.Lock()
		defer mu.Unlock()
		retried := -1
		for i, n := range order[1:] {
			if n == 0 {
				retried = i + 1
				break
			}
		}
		if retried < 0 || recorded < 0 || recorded > retried {
			t.Fatalf("the oldest item's retry: written when %d attempts had started, ran as attempt %d (order %v)", recorded, retried, order)
		}
		between := retried - recorded
		t.Logf("the retry of the oldest item ran after %d newer items, %d of them started after it was written", retried-1, between)
		// One worker of 30 ms handlers starts at most 34 items a second:
		// its prefetch is at most 4 items, and one may be starting.
		if between > 5 {
			t.Fatalf("the oldest item's due retry ran after %d newer items that started once it was written (order %v); want at most the 5 leased before it came due", between, order)
		}
	})
}
