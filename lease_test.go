package redrive_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/delaystore"
	"github.com/redrive/redrive/sqlite"
)

// completeDelay is how late Complete answers in the lease tests: enough for
// the claimer to take an item's next stage between a completion's commit
// and the completer's bookkeeping.
func completeDelay(s redrive.Store) time.Duration {
	if _, ok := s.(*sqlite.Store); ok {
		return 20 * time.Millisecond
	}
	return 50 * time.Millisecond
}

// calls counts handler calls per item and stage.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) add(it *redrive.Item) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[fmt.Sprintf("%d/%s", it.ID, it.Stage)]++
}

func (c *calls) get(id int64, stage string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[fmt.Sprintf("%d/%s", id, stage)]
}

// Handlers that run longer than the lease are kept alive by heartbeats,
// while completions answer late: the claimer takes an item's next stage
// before the completer has done its bookkeeping for the previous one, so
// the process holds an old and a new lease on one item. The new lease must
// stay heartbeated: no item may be rescued as lost, and every handler runs
// exactly once per stage.
func TestHandlersLongerThanLeaseKeepTheirLeases(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		const n, work = 20, 1200 * time.Millisecond
		ds := delaystore.New(s, delaystore.Delays{Complete: completeDelay(s), Heartbeat: 10 * time.Millisecond, Claim: 5 * time.Millisecond})
		var ran calls
		handle := func(ctx context.Context, it *redrive.Item) ([]byte, error) {
			ran.add(it)
			t := time.NewTimer(work)
			defer t.Stop()
			select {
			case <-t.C:
				return it.Payload, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		p := redrive.Pipeline{Name: "long", Stages: []redrive.Stage{
			{Name: "one", Policy: fast(5), Handle: handle},
			{Name: "two", Policy: fast(5), Handle: handle},
		}}
		cfg := testConfig(nil)
		cfg.Workers = n
		cfg.LeaseDuration = time.Second
		cfg.HeartbeatInterval = 200 * time.Millisecond
		logs := &captured{}
		cfg.Logger = slog.New(logs)
		c := startClient(t, ds, cfg, p)
		run, err := c.StartRun(context.Background(), "long", items(n), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, run)
		its, err := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID})
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for _, it := range its {
			atts, err := s.Attempts(context.Background(), it.ID)
			if err != nil {
				t.Fatal(err)
			}
			var outcomes []string
			for _, a := range atts {
				outcomes = append(outcomes, string(a.Outcome))
			}
			if it.State != redrive.StateSucceeded || strings.Join(outcomes, " ") != "succeeded succeeded" ||
				ran.get(it.ID, "one") != 1 || ran.get(it.ID, "two") != 1 {
				bad++
				t.Errorf("item %d ended %s with attempts %v after %d+%d handler calls; want succeeded, two successes, one call per stage",
					it.ID, it.State, outcomes, ran.get(it.ID, "one"), ran.get(it.ID, "two"))
			}
		}
		if r.Counts.Succeeded != n || bad > 0 {
			t.Fatalf("%d of %d items went wrong; run counts %+v", bad, n, r.Counts)
		}
		if msgs := logs.matching("lost"); len(msgs) > 0 {
			t.Fatalf("a fault-free run logged lost leases: %q", msgs)
		}
	})
}

// When this process's own rescuer takes over an item whose lease expired
// (here, because heartbeats failed for longer than the lease), the older
// task's handler is interrupted: the item is no longer its own.
func TestOwnRescueInterruptsTheOlderHandler(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ds := delaystore.New(s, delaystore.Delays{})
		ds.FailHeartbeats(true)
		first := make(chan struct{})
		interrupted := make(chan struct{})
		var ran atomic.Int64
		p := redrive.Pipeline{Name: "takeover", Stages: []redrive.Stage{{Name: "s", Policy: fast(3),
			Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
				if ran.Add(1) > 1 {
					return it.Payload, nil
				}
				close(first)
				t := time.NewTimer(time.Minute)
				defer t.Stop()
				select {
				case <-ctx.Done():
					close(interrupted)
					return nil, ctx.Err()
				case <-t.C:
					return it.Payload, nil
				}
			}}}}
		rec := &recorder{}
		cfg := testConfig(rec)
		cfg.LeaseDuration = 300 * time.Millisecond
		cfg.HeartbeatInterval = 50 * time.Millisecond
		rescued := make(chan struct{}, 1)
		cfg.Observers = append(cfg.Observers, func(e redrive.Event) {
			if _, ok := e.(redrive.Rescued); ok {
				select {
				case rescued <- struct{}{}:
				default:
				}
			}
		})
		c := startClient(t, ds, cfg, p)
		run, err := c.StartRun(context.Background(), "takeover", items(1), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		<-first
		select {
		case <-rescued:
		case <-time.After(30 * time.Second):
			t.Fatal("the expired lease was not rescued")
		}
		ds.FailHeartbeats(false)
		select {
		case <-interrupted:
		case <-time.After(30 * time.Second):
			t.Fatal("the rescuer took the item over, but the older handler was not interrupted")
		}
		r := wait(t, c, run)
		if r.Counts.Succeeded != 1 {
			t.Fatalf("%+v", r.Counts)
		}
		its, _ := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID})
		atts, err := s.Attempts(context.Background(), its[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(atts) != 2 || atts[0].Outcome != redrive.OutcomeLost || atts[1].Outcome != redrive.OutcomeSucceeded {
			t.Fatalf("attempts %+v, want lost then succeeded", atts)
		}
	})
}

// captured is a slog.Handler that keeps the messages of warnings and
// errors.
type captured struct {
	mu   sync.Mutex
	msgs []string
}

func (h *captured) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *captured) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}

func (h *captured) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captured) WithGroup(string) slog.Handler      { return h }

func (h *captured) matching(sub string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, m := range h.msgs {
		if strings.Contains(m, sub) {
			out = append(out, m)
		}
	}
	return out
}

// In a run without faults, heartbeats race this process's own completions
// (a heartbeat every few milliseconds, completions that answer late): a
// lease that ended because it was completed is no loss, and no loss may be
// logged.
func TestHeartbeatRacingCompletionsLogsNoLoss(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ds := delaystore.New(s, delaystore.Delays{Complete: completeDelay(s), Heartbeat: time.Millisecond})
		p := redrive.Pipeline{Name: "race", Stages: []redrive.Stage{
			{Name: "one", Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) { return it.Payload, nil }},
			{Name: "two", Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) { return it.Payload, nil }},
		}}
		cfg := testConfig(nil)
		cfg.HeartbeatInterval = 2 * time.Millisecond
		logs := &captured{}
		cfg.Logger = slog.New(logs)
		c := startClient(t, ds, cfg, p)
		run, err := c.StartRun(context.Background(), "race", items(300), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := wait(t, c, run); r.Counts.Succeeded != 300 {
			t.Fatalf("%+v", r.Counts)
		}
		if msgs := logs.matching("lost"); len(msgs) > 0 {
			t.Fatalf("a fault-free run logged %d lost leases: %q", len(msgs), msgs[0])
		}
	})
}
