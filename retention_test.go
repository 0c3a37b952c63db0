package redrive_test

import (
	"context"
	"errors"
	"log/slog"
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

// deleteLog is a store that notes each retention delete: the size it was
// asked for and how many items it deleted, and "pass" where
// DeleteFinishedRuns ends a retention pass's succeeded items.
type deleteLog struct {
	redrive.Store
	mu    sync.Mutex
	calls []deleteCall
}

type deleteCall struct {
	pass     bool
	limit, n int
}

func (s *deleteLog) DeleteSucceeded(ctx context.Context, before time.Time, limit int) (int, error) {
	n, err := s.Store.DeleteSucceeded(ctx, before, limit)
	s.mu.Lock()
	s.calls = append(s.calls, deleteCall{limit: limit, n: n})
	s.mu.Unlock()
	return n, err
}

func (s *deleteLog) DeleteFinishedRuns(ctx context.Context, before time.Time, limit int) (int, int, error) {
	s.mu.Lock()
	s.calls = append(s.calls, deleteCall{pass: true})
	s.mu.Unlock()
	return s.Store.DeleteFinishedRuns(ctx, before, limit)
}

// passes returns the sizes asked for and the items deleted by each
// finished pass's DeleteSucceeded calls.
func (s *deleteLog) passes() (limits, deleted [][]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l, d []int
	for _, c := range s.calls {
		if c.pass {
			limits, deleted = append(limits, l), append(deleted, d)
			l, d = nil, nil
			continue
		}
		l, d = append(l, c.limit), append(d, c.n)
	}
	return limits, deleted
}

// One pass deletes a backlog many times its starting batch, growing the
// batch while batches come back full, and the next pass starts again at
// RetentionBatch.
func TestRetentionPassDeletesBacklog(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		const backlog, start = 500, 10
		log := &deleteLog{Store: s}
		clock := &retentionClock{t: time.Now()}
		p := redrive.Pipeline{Name: "backlog", Stages: []redrive.Stage{{Name: "s", Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) { return nil, nil }}}}
		cfg := testConfig(nil)
		// A pass deletes for at most ten intervals: 10 s here, so that a
		// busy machine, where each statement takes a quarter second, does
		// not end the pass before the backlog (it did at 1 s).
		cfg.Now, cfg.Retention, cfg.RetentionInterval, cfg.RetentionBatch = clock.now, time.Hour, time.Second, start
		c := startClient(t, log, cfg, p)
		run, err := c.StartRun(context.Background(), "backlog", items(backlog), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, c, run)
		clock.add(2 * time.Hour)
		// The pass that deleted anything, and the one after it.
		var limits, deleted []int
		var next []int
		waitFor(t, "a retention pass deleted the backlog and another pass followed", func() bool {
			ls, ds := log.passes()
			for i := range ds {
				if sum(ds[i]) > 0 && i+1 < len(ls) {
					limits, deleted, next = ls[i], ds[i], ls[i+1]
					return true
				}
			}
			return false
		})
		if sum(deleted) != backlog {
			t.Fatalf("one pass deleted %v = %d items, want all %d", deleted, sum(deleted), backlog)
		}
		// Batches of 10 would take 51 statements; doubling takes 6. Only
		// batches that each took longer than a quarter second would keep
		// the size at 10.
		if limits[0] != start || len(limits) >= backlog/start || deleted[len(deleted)-1] >= limits[len(limits)-1] {
			t.Fatalf("pass asked for %v and deleted %v; want a first batch of %d, growing, ending short", limits, deleted, start)
		}
		for i, l := range limits {
			if l < start || l > 20_000 || i > 0 && deleted[i-1] < limits[i-1] {
				t.Fatalf("pass asked for %v and deleted %v", limits, deleted)
			}
		}
		if len(next) == 0 || next[0] != start {
			t.Fatalf("the next pass asked for %v, want a first batch of %d", next, start)
		}
	})
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// slowDeletes is a store whose retention deletes take delay each, as on a
// loaded disk.
type slowDeletes struct {
	redrive.Store
	delay time.Duration
}

func (s slowDeletes) DeleteSucceeded(ctx context.Context, before time.Time, limit int) (int, error) {
	time.Sleep(s.delay)
	return s.Store.DeleteSucceeded(ctx, before, limit)
}

// A retention pass that runs out of time with batches still coming back
// full says so: its RetentionPassed event counts the succeeded items it
// left (exactly those it did not delete, nothing else deleting here), the
// log warns that retention is behind, and later passes delete the rest
// until one reports a backlog of 0.
func TestRetentionReportsBacklog(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		const n = 3000
		clock := &retentionClock{t: time.Now()}
		p := redrive.Pipeline{Name: "backlog", Stages: []redrive.Stage{{Name: "s", Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) { return nil, nil }}}}
		rec := &recorder{}
		cfg := testConfig(rec)
		logs := &captured{}
		cfg.Logger = slog.New(logs)
		// A pass has a second (the least it is given) for its batches of
		// 2, 4, 8, ... items, each 100 ms late: at most ten batches, about
		// 1,000 items, fewer than n.
		cfg.Now, cfg.Retention, cfg.RetentionInterval, cfg.RetentionBatch = clock.now, time.Hour, 10*time.Millisecond, 2
		c := startClient(t, slowDeletes{Store: s, delay: 100 * time.Millisecond}, cfg, p)
		run, err := c.StartRun(context.Background(), "backlog", items(n), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, c, run)
		clock.add(2 * time.Hour)
		waitBacklogCleared(t, rec, n, "items", func(p redrive.RetentionPassed) (int, int) { return p.Succeeded, p.Backlog })
		if w := logs.matching("retention is behind"); len(w) == 0 {
			t.Errorf("no warning that retention is behind; warnings: %q", logs.matching(""))
		}
	})
}

// waitBacklogCleared waits for the retention passes rec records to delete
// n rows of what (passed reads a pass's deleted rows and backlog), then
// checks that there were at least two, that each pass but the last left
// a backlog of exactly the rows not deleted yet (nothing else deleting
// them), and that the last left none.
func waitBacklogCleared(t *testing.T, rec *recorder, n int, what string, passed func(redrive.RetentionPassed) (deleted, backlog int)) {
	t.Helper()
	passes := func() []redrive.RetentionPassed {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		var out []redrive.RetentionPassed
		for _, e := range rec.events {
			if p, ok := e.(redrive.RetentionPassed); ok {
				if d, b := passed(p); d > 0 || b > 0 {
					out = append(out, p)
				}
			}
		}
		return out
	}
	waitFor(t, "a pass that caught up", func() bool {
		ps := passes()
		if len(ps) == 0 {
			return false
		}
		_, b := passed(ps[len(ps)-1])
		return b == 0
	})
	ps := passes()
	if len(ps) < 2 {
		t.Fatalf("passes %+v: want the first behind and a later one caught up", ps)
	}
	deleted := 0
	for i, p := range ps {
		d, b := passed(p)
		deleted += d
		if i < len(ps)-1 && b != n-deleted {
			t.Errorf("pass %d deleted %d %s and left %d, want the %d not deleted yet (%+v)", i, d, what, b, n-deleted, ps)
		}
	}
	if deleted != n {
		t.Errorf("passes deleted %d %s, want %d: %+v", deleted, what, n, ps)
	}
}
