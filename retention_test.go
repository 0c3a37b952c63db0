package redrive_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// retentionClock is a clock that tests move forward.
type retentionClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *retentionClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *retentionClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestRetentionDeletesOldSucceeded(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		clock := &retentionClock{t: time.Now()}
		p := redrive.Pipeline{Name: "ret", Stages: []redrive.Stage{{Name: "s", Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) { return nil, nil }}}}
		cfg := testConfig(nil)
		cfg.Now, cfg.Retention, cfg.RetentionInterval, cfg.RetentionBatch = clock.now, time.Hour, 10*time.Millisecond, 2
		c := startClient(t, s, cfg, p)
		run, _ := c.StartRun(context.Background(), "ret", items(5), redrive.RunOptions{})
		wait(t, c, run)
		clock.add(2 * time.Hour)
		// Five items in batches of two: one pass deletes them all.
		waitFor(t, "succeeded items past retention deleted", func() bool {
			n, err := s.Count(context.Background(), redrive.ItemFilter{RunID: run.ID})
			return err == nil && n == 0
		})
		// The run still counts them: its counts are its history.
		r, err := s.GetRun(context.Background(), run.ID)
		if err != nil || r.Counts != (redrive.Counts{Total: 5, Succeeded: 5}) || r.Status != redrive.RunCompleted {
			t.Fatalf("run after retention = %+v, %v; want 5 succeeded, completed", r, err)
		}
	})
}

// Runs finished longer than RunRetention ago are deleted with every item,
// dead ones too; a run finished more recently stays whole.
func TestRunRetentionDeletesOldRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		clock := &retentionClock{t: time.Now()}
		p := redrive.Pipeline{Name: "runret", Stages: []redrive.Stage{{Name: "s", Policy: fast(1),
			Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				if string(it.Payload) == `{"n":0}` {
					return nil, errors.New("bad input")
				}
				return it.Payload, nil
			}}}}
		cfg := testConfig(nil)
		// Succeeded items are kept longer than runs, so that only
		// RunRetention can delete the items here.
		cfg.Now, cfg.Retention, cfg.RunRetention = clock.now, 365*24*time.Hour, 30*24*time.Hour
		cfg.RetentionInterval, cfg.RetentionBatch = 10*time.Millisecond, 2
		c := startClient(t, s, cfg, p)
		old, err := c.StartRun(ctx, "runret", items(5), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := wait(t, c, old); r.Counts.Dead != 1 || r.Counts.Succeeded != 4 {
			t.Fatalf("old run: %+v", r.Counts)
		}
		deadItem, err := s.ListItems(ctx, redrive.ItemFilter{RunID: old.ID, States: []redrive.State{redrive.StateDead}})
		if err != nil || len(deadItem) != 1 {
			t.Fatalf("dead items %v, %v", deadItem, err)
		}
		clock.add(20 * 24 * time.Hour)
		recent, err := c.StartRun(ctx, "runret", items(3), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, c, recent)
		clock.add(11 * 24 * time.Hour)
		waitFor(t, "the old run deleted", func() bool {
			_, err := s.GetRun(ctx, old.ID)
			return errors.Is(err, redrive.ErrNotFound)
		})
		if _, err := s.GetItem(ctx, deadItem[0].ID); !errors.Is(err, redrive.ErrNotFound) {
			t.Errorf("dead item of a deleted run: %v; want ErrNotFound", err)
		}
		if r, err := s.GetRun(ctx, recent.ID); err != nil || r.Counts.Total != 3 {
			t.Errorf("recent run: %+v, %v; want it whole", r.Counts, err)
		}
	})
}
