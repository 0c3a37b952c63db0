package redrive_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// TestCancelRunCancelsWhatRunningItemsMoveOnTo checks CancelRun's promise
// that running items finish their attempt and that what they would move
// on to is canceled: the engine decides so as each attempt ends, without
// the run loop's later sweep of the aborted run's pending items, which
// this test keeps from running.
func TestCancelRunCancelsWhatRunningItemsMoveOnTo(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		started := make(chan struct{}, 3)
		release := make(chan struct{})
		var second atomic.Int32
		p := redrive.Pipeline{Name: "cancelmove", Stages: []redrive.Stage{
			{Name: "first", Policy: fast(1), Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
				started <- struct{}{}
				select {
				case <-release:
					return it.Payload, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}},
			{Name: "second", Policy: fast(1), Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				second.Add(1)
				return it.Payload, nil
			}},
		}}
		cfg := testConfig(nil)
		cfg.RunCheckInterval = time.Hour
		c := startClient(t, s, cfg, p)
		run, err := c.StartRun(ctx, "cancelmove", items(3), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			select {
			case <-started:
			case <-ctx.Done():
				t.Fatal("the first stage's handlers did not start")
			}
		}
		if _, err := c.CancelRun(ctx, run.ID, "stopped by the test"); err != nil {
			t.Fatal(err)
		}
		close(release)
		// The client above looks at runs once an hour; this one waits.
		r := wait(t, redrive.NewClient(s, redrive.Config{RunCheckInterval: 5 * time.Millisecond}), run)
		if r.Status != redrive.RunAborted || r.Counts.Canceled != 3 || r.Counts.Succeeded != 0 {
			t.Fatalf("run %s %+v; want aborted with 3 canceled", r.Status, r.Counts)
		}
		if n := second.Load(); n != 0 {
			t.Fatalf("the second stage ran %d times in a canceled run", n)
		}
		its, err := s.ListItems(ctx, redrive.ItemFilter{RunID: run.ID, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range its {
			if it.State != redrive.StateCanceled || it.Stage != "second" || it.Reason == nil ||
				!strings.Contains(it.Reason.Error, "stopped by the test") {
				t.Fatalf("item %d: %s at %q, reason %+v; want canceled at the stage it would move on to, with the run's reason",
					it.ID, it.State, it.Stage, it.Reason)
			}
		}
	})
}
