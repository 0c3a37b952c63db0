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
