package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redrive/redrive/retry"
)

func TestLayerMakesDoNested(t *testing.T) {
	p := retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, JitterMode: retry.JitterNone}
	calls := 0
	op := func(context.Context) error { calls++; return errors.New("down") }
	ctx := retry.Layer(context.Background())
	if !retry.InNested(ctx) {
		t.Fatal("Layer's context is not nested")
	}
	err := retry.Do(ctx, p, op)
	if calls != 1 || retry.Classify(err).Class != retry.ClassRetryable {
		t.Fatalf("nested Do made %d calls (want 1), class %v", calls, retry.Classify(err).Class)
	}
	calls = 0
	p.Independent = true
	_ = retry.Do(ctx, p, op)
	if calls != 3 {
		t.Fatalf("independent Do made %d calls, want 3", calls)
	}
}

// TestExhaustedFinal is seed 004's layering: an inner infrastructure layer
// that retries on its own (Independent) and owns its failures
// (ExhaustedFinal) costs 3 calls × 1 outer attempt = 3 when its dependency
// stays down; by default the outer layer retries what the inner one gave up
// on, 3 × 3 = 9.
func TestExhaustedFinal(t *testing.T) {
	errDown := errors.New("503 backend error")
	inner := retry.Policy{Name: "bigquery", MaxAttempts: 3, BaseDelay: time.Millisecond, JitterMode: retry.JitterNone, Independent: true}
	outer := retry.Policy{Name: "workflow", MaxAttempts: 3, BaseDelay: time.Millisecond, JitterMode: retry.JitterNone}
	run := func(inner retry.Policy) (int, error) {
		calls := 0
		err := retry.Do(context.Background(), outer, func(ctx context.Context) error {
			return retry.Do(ctx, inner, func(context.Context) error { calls++; return errDown })
		})
		return calls, err
	}
	if calls, _ := run(inner); calls != 9 {
		t.Fatalf("default (keep class): %d calls, want 3 × 3 = 9", calls)
	}
	inner.Exhausted = retry.ExhaustedFinal
	calls, err := run(inner)
	if calls != 3 {
		t.Fatalf("ExhaustedFinal: %d calls, want 3 × 1 = 3", calls)
	}
	var outerErr *retry.Error
	if !errors.As(err, &outerErr) || outerErr.Layer != "workflow" || outerErr.Attempts != 1 || outerErr.Reason != retry.ReasonFinal {
		t.Fatalf("outer error %#v", err)
	}
	var innerErr *retry.Error
	if !errors.As(outerErr.Err, &innerErr) || innerErr.Layer != "bigquery" || innerErr.Attempts != 3 ||
		innerErr.Reason != retry.ReasonAttempts || innerErr.Outcome.Class != retry.ClassFinal || !errors.Is(err, errDown) {
		t.Fatalf("inner error %#v", outerErr.Err)
	}
	if want := "workflow: bigquery: gave up after 3 attempts (attempts exhausted): 503 backend error"; err.Error() != want {
		t.Errorf("message %q\nwant    %q", err.Error(), want)
	}
	// A final error stays final whatever Exhausted says, and a budget or a
	// breaker refusing is not exhaustion: the outer layer may come back.
	inner.Exhausted = retry.ExhaustedRetryable
	innerOnly := func(p retry.Policy, err error) *retry.Error {
		var re *retry.Error
		errors.As(retry.Do(context.Background(), p, func(context.Context) error { return err }), &re)
		return re
	}
	if re := innerOnly(inner, retry.Final(errDown)); re.Outcome.Class != retry.ClassFinal {
		t.Errorf("final became %v", re.Outcome.Class)
	}
	inner.Exhausted = retry.ExhaustedFinal
	inner.Budget = retry.NewBudget(retry.BudgetOptions{MinPerSecond: -1})
	if re := innerOnly(inner, errDown); re.Reason != retry.ReasonBudget || re.Outcome.Class != retry.ClassRetryable {
		t.Errorf("budget refusal: reason %q, class %v; want retryable", re.Reason, re.Outcome.Class)
	}
}

// TestLayerNames: errors and events name their layer, messages do not stack,
// and counts read in the singular and the plural.
func TestLayerNames(t *testing.T) {
	errDown := errors.New("down")
	var events []retry.Event
	hook := func(e retry.Event) { events = append(events, e) }
	p := retry.Policy{Name: "llm", MaxAttempts: 2, BaseDelay: time.Millisecond, JitterMode: retry.JitterNone, OnRetry: hook, OnGiveUp: hook}
	err := retry.Do(context.Background(), p, func(context.Context) error { return errDown })
	if want := "llm: gave up after 2 attempts (attempts exhausted): down"; err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
	if len(events) != 2 || events[0].Layer != "llm" || events[1].Layer != "llm" || events[1].Reason != retry.ReasonAttempts {
		t.Errorf("events %+v", events)
	}
	p.MaxAttempts = 1
	err = retry.Do(context.Background(), p, func(context.Context) error { return errDown })
	if want := "llm: gave up after 1 attempt (attempts exhausted): down"; err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
	// A named layer nested without Independent makes one attempt and names
	// itself in the error it passes up, with the classification kept.
	err = retry.Do(context.Background(), retry.Policy{Name: "workflow", MaxAttempts: 2, BaseDelay: time.Millisecond}, func(ctx context.Context) error {
		return retry.Do(ctx, retry.Policy{Name: "bigquery"}, func(context.Context) error { return retry.Final(errDown) })
	})
	if want := "workflow: gave up after 1 attempt (final error): bigquery: down"; err.Error() != want || retry.Classify(err).Class != retry.ClassFinal || !errors.Is(err, errDown) {
		t.Errorf("nested named: %q (class %v), want %q, final", err.Error(), retry.Classify(err).Class, want)
	}
	// An open breaker: no attempt, said so once.
	br := retry.NewBreaker(retry.BreakerOptions{ConsecutiveFailures: 1})
	br.Record(errDown)
	err = retry.Do(context.Background(), retry.Policy{Name: "api", Breaker: br}, func(context.Context) error { return nil })
	if want := "api: no attempt made (circuit open)"; err.Error() != want {
		t.Errorf("open breaker: %q, want %q", err.Error(), want)
	}
	// The caller's cancellation says which.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = retry.Do(ctx, retry.Policy{}, func(context.Context) error { return nil })
	if want := "no attempt made (context done: context canceled)"; err.Error() != want {
		t.Errorf("canceled: %q, want %q", err.Error(), want)
	}
}

func TestParseExhaustion(t *testing.T) {
	for s, want := range map[string]retry.Exhaustion{"": retry.ExhaustedKeepClass, "final": retry.ExhaustedFinal,
		"Retryable": retry.ExhaustedRetryable, "keep-class": retry.ExhaustedKeepClass} {
		got, err := retry.ParseExhaustion(s)
		if err != nil || got != want {
			t.Errorf("ParseExhaustion(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := retry.ParseExhaustion("fnal"); !errors.Is(err, retry.ErrInvalidPolicy) {
		t.Errorf("ParseExhaustion(fnal): %v", err)
	}
	if err := (retry.Policy{Exhausted: 7}).Validate(); !errors.Is(err, retry.ErrInvalidPolicy) {
		t.Errorf("Validate(Exhausted 7): %v", err)
	}
}
