package redrive

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redrive/redrive/retry"
)

// decideTask is a task of a one-stage pipeline's item at its first
// attempt, the stage's configuration hashed as Register hashes it.
func decideTask() *task {
	p := &Pipeline{Name: "p", Stages: []Stage{{Name: "s", Handle: func(context.Context, *Item) ([]byte, error) { return nil, nil }}}}
	p.hashes = []string{p.Stages[0].ConfigHash()}
	return &task{pipeline: p, stage: 0, lease: &Lease{Token: 1, Item: Item{ID: 7, RunID: 3, Pipeline: "p", Stage: "s"}}}
}

// An attempt's events are built for the observers; with none, the decision
// is the same and no event is built.
func TestDecideBuildsEventsForObservers(t *testing.T) {
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	end := start.Add(time.Millisecond)
	pol := retry.Policy{MaxAttempts: 3}
	for _, observed := range []bool{false, true} {
		e := &engine{aborted: map[int64]string{}}
		if observed {
			e.cfg.Observers = []func(Event){func(Event) {}}
		}
		ok, failed := decideTask(), decideTask()
		e.decide(ok, pol, []byte(`{}`), nil, retry.Outcome{}, start, end)
		e.decide(failed, pol, nil, errors.New("down"), retry.Outcome{Class: retry.ClassRetryable}, start, end)
		if ok.comp.State != StateSucceeded || failed.comp.State != StatePending || failed.comp.Record.Outcome != OutcomeRetry {
			t.Fatalf("observed %v: decided %s and %s (%s), want succeeded and pending (retry)", observed,
				ok.comp.State, failed.comp.State, failed.comp.Record.Outcome)
		}
		if !observed {
			if ok.events != nil || failed.events != nil {
				t.Errorf("no observer: built events %v and %v", ok.events, failed.events)
			}
			continue
		}
		if len(ok.events) != 2 || len(failed.events) != 2 {
			t.Fatalf("observed: events %v and %v, want two each", ok.events, failed.events)
		}
		f, _ := ok.events[0].(AttemptFinished)
		if _, s := ok.events[1].(ItemSucceeded); f.Outcome != OutcomeSucceeded || f.Duration != time.Millisecond || !s {
			t.Errorf("success: events %+v, want the attempt finished succeeded, then the item succeeded", ok.events)
		}
		f, _ = failed.events[0].(AttemptFinished)
		r, _ := failed.events[1].(RetryScheduled)
		if f.Outcome != OutcomeRetry || f.Error != "down" || r.ItemID != 7 || r.Attempt != 1 {
			t.Errorf("failure: events %+v, want the attempt finished as a retry, then the retry scheduled", failed.events)
		}
	}
}

// go test -run '^$' -bench Decide -benchmem .
func BenchmarkDecide(b *testing.B) {
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	pol := retry.Policy{MaxAttempts: 3}
	for _, observed := range []bool{false, true} {
		name := "unobserved"
		e := &engine{aborted: map[int64]string{}}
		if observed {
			name = "observed"
			e.cfg.Observers = []func(Event){func(Event) {}}
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			t := decideTask()
			for b.Loop() {
				t.events = nil
				e.decide(t, pol, []byte(`{}`), nil, retry.Outcome{}, start, start.Add(time.Millisecond))
			}
		})
	}
}
