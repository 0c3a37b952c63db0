package redrive_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry"
)

// TestEngineClassifiesLikeDo: a stage's custom classifier means in the
// durable engine what it means in retry.Do. With a Chain whose unknown class
// is final, an unknown error is dead after 1 call (retry.Do makes 1), a known
// timeout is retried, and an explicit RateLimited wrapper waits without
// consuming the stage's single attempt.
func TestEngineClassifiesLikeDo(t *testing.T) {
	errTimeout := errors.New("timeout")
	eachStore(t, func(t *testing.T, s redrive.Store) {
		var mu sync.Mutex
		calls := map[string]int{}
		handle := func(_ context.Context, it *redrive.Item) ([]byte, error) {
			kind := string(it.Payload)
			mu.Lock()
			calls[kind]++
			n := calls[kind]
			mu.Unlock()
			switch kind {
			case `"unknown"`:
				return nil, errors.New("unexpected answer")
			case `"timeout"`:
				return nil, errTimeout
			default: // rate limited three times, then served
				if n <= 3 {
					return nil, retry.RateLimited(errors.New("429 too many requests"), 10*time.Millisecond)
				}
				return it.Payload, nil
			}
		}
		chain := retry.Chain(retry.ClassFinal, retry.Is(errTimeout, retry.ClassRetryable))
		policy := fast(3)
		policy.Classifier = chain
		limited := fast(1)
		limited.Classifier = chain
		c := startClient(t, s, testConfig(nil),
			redrive.Pipeline{Name: "chain", Stages: []redrive.Stage{{Name: "call", Policy: policy, Handle: handle}}},
			redrive.Pipeline{Name: "limited", Stages: []redrive.Stage{{Name: "call", Policy: limited, Handle: handle}}})

		run, err := c.StartRun(context.Background(), "chain",
			[]redrive.NewItem{{Payload: []byte(`"unknown"`)}, {Payload: []byte(`"timeout"`)}}, redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, c, run)
		dead := deadReasons(t, s, run.ID)
		if r := dead[`"unknown"`]; r.Class != "final" || r.Attempts != 1 {
			t.Errorf("unknown error: reason %+v, want final after 1 attempt", r)
		}
		if r := dead[`"timeout"`]; r.Class != "retryable" || r.Attempts != 3 {
			t.Errorf("timeout: reason %+v, want retryable after 3 attempts", r)
		}

		run, err = c.StartRun(context.Background(), "limited", []redrive.NewItem{{Payload: []byte(`"limited"`)}}, redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := wait(t, c, run); r.Counts.Succeeded != 1 {
			t.Fatalf("rate limited item: %+v, want it to succeed on its single attempt", r.Counts)
		}
		mu.Lock()
		defer mu.Unlock()
		want := map[string]int{`"unknown"`: 1, `"timeout"`: 3, `"limited"`: 4}
		for k, n := range want {
			if calls[k] != n {
				t.Errorf("%s: %d calls, want %d", k, calls[k], n)
			}
		}
	})
}

// deadReasons returns the reasons of a run's dead items by payload.
func deadReasons(t *testing.T, s redrive.Store, runID int64) map[string]redrive.Reason {
	t.Helper()
	its, err := s.ListItems(context.Background(), redrive.ItemFilter{RunID: runID, States: []redrive.State{redrive.StateDead}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]redrive.Reason{}
	for _, it := range its {
		if it.Reason != nil {
			out[string(it.Input)] = *it.Reason
		}
	}
	return out
}
