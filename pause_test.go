package redrive_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// TestPausedStageIsNotClaimed: items wait at a paused stage while the rest
// of the engine goes on working, and go on when the stage is resumed. The
// pause is a store row, so it holds for every process on the store.
func TestPausedStageIsNotClaimed(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		if ok, err := s.PauseStage(ctx, redrive.StagePause{Pipeline: "p", Stage: "b", By: "test", At: time.Now()}); err != nil || !ok {
			t.Fatalf("PauseStage = %v, %v", ok, err)
		}
		var atB atomic.Int32
		pass := func(_ context.Context, it *redrive.Item) ([]byte, error) { return it.Payload, nil }
		p := redrive.Pipeline{Name: "p", Stages: []redrive.Stage{
			{Name: "a", Handle: pass, Policy: fast(1)},
			{Name: "b", Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) { atB.Add(1); return it.Payload, nil }, Policy: fast(1)},
		}}
		other := redrive.Pipeline{Name: "q", Stages: []redrive.Stage{{Name: "only", Handle: pass, Policy: fast(1)}}}
		c := startClient(t, s, testConfig(nil), p, other)
		run, err := c.StartRun(ctx, "p", make([]redrive.NewItem, 5), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for pendingAt(t, s, run.ID, "b") != 5 {
			if time.Now().After(deadline) {
				t.Fatalf("items did not reach the paused stage b")
			}
			time.Sleep(10 * time.Millisecond) // polling a condition
		}
		// Later claims go on for other stages while b stays paused.
		later, err := c.StartRun(ctx, "q", make([]redrive.NewItem, 3), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := wait(t, c, later); r.Counts.Succeeded != 3 {
			t.Fatalf("other pipeline while b is paused: %+v", r.Counts)
		}
		if n := atB.Load(); n != 0 || pendingAt(t, s, run.ID, "b") != 5 {
			t.Fatalf("the paused stage ran %d times", n)
		}
		if ok, err := s.ResumeStage(ctx, "p", "b"); err != nil || !ok {
			t.Fatalf("ResumeStage = %v, %v", ok, err)
		}
		if r := wait(t, c, run); r.Counts.Succeeded != 5 || atB.Load() != 5 {
			t.Fatalf("after resuming: %+v, b ran %d times", r.Counts, atB.Load())
		}
	})
}

// pendingAt counts the pending items of a run at a stage.
func pendingAt(t *testing.T, s redrive.Store, run int64, stage string) int {
	t.Helper()
	n, err := s.Count(context.Background(), redrive.ItemFilter{RunID: run, Stage: stage, States: []redrive.State{redrive.StatePending}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
