package retry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fast is a policy with tiny deterministic delays.
func fast(attempts int) Policy {
	return Policy{MaxAttempts: attempts, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, JitterMode: JitterNone}
}

var errBoom = errors.New("boom")

func TestDoSuccessFirstTry(t *testing.T) {
	calls := 0
	err := Do(context.Background(), fast(3), func(ctx context.Context) error {
		calls++
		if !InNested(ctx) {
			t.Error("op's ctx must carry the nesting marker")
		}
		return nil
	})
	if err != nil || calls != 1 {
		t.Fatalf("err=%v calls=%d", err, calls)
	}
	if InNested(context.Background()) {
		t.Error("Background is not nested")
	}
}

func TestDoEventuallySucceeds(t *testing.T) {
	calls := 0
	v, err := DoValue(context.Background(), fast(5), func(ctx context.Context) (string, error) {
		calls++
		if calls < 3 {
			return "", errBoom
		}
		return "ok", nil
	})
	if err != nil || v != "ok" || calls != 3 {
		t.Fatalf("v=%q err=%v calls=%d", v, err, calls)
	}
}

func TestDoExhaustedAndHooks(t *testing.T) {
	var retries, giveUps []Event
	p := fast(3)
	p.BaseDelay, p.MaxDelay = time.Millisecond, time.Second
	p.OnRetry = func(e Event) { retries = append(retries, e) }
	p.OnGiveUp = func(e Event) { giveUps = append(giveUps, e) }
	calls := 0
	err := Do(context.Background(), p, func(context.Context) error { calls++; return errBoom })
	if calls != 3 {
		t.Fatalf("calls = %d", calls)
	}
	var re *Error
	if !errors.As(err, &re) {
		t.Fatalf("err %T is not *Error", err)
	}
	if re.Attempts != 3 || re.Reason != ReasonAttempts || re.Outcome.Class != ClassRetryable || !errors.Is(err, errBoom) {
		t.Errorf("bad error: %+v", re)
	}
	if err.Error() != "gave up after 3 attempts (attempts exhausted): boom" {
		t.Errorf("message %q", err.Error())
	}
	if len(retries) != 2 || retries[0].Attempt != 1 || retries[0].Delay != time.Millisecond ||
		retries[1].Attempt != 2 || retries[1].Delay != 2*time.Millisecond || retries[1].Err != errBoom {
		t.Errorf("OnRetry events %+v", retries)
	}
	if len(giveUps) != 1 || giveUps[0].Attempt != 3 || giveUps[0].Err != errBoom {
		t.Errorf("OnGiveUp events %+v", giveUps)
	}
	// *Error carries the classification for an outer layer.
	if o := Classify(err); o.Class != ClassRetryable {
		t.Errorf("Classify(*Error) = %v", o)
	}
}

func TestDoFinalStopsAtOnce(t *testing.T) {
	calls := 0
	bad := &myErr{code: 400}
	err := Do(context.Background(), fast(5), func(context.Context) error { calls++; return Final(bad) })
	if calls != 1 {
		t.Fatalf("calls = %d", calls)
	}
	var me *myErr
	if !errors.As(err, &me) || me != bad {
		t.Error("errors.As through *Error failed")
	}
	var re *Error
	if !errors.As(err, &re) || re.Outcome.Class != ClassFinal || re.Reason != ReasonFinal || re.Attempts != 1 {
		t.Errorf("err = %#v", err)
	}
	if Classify(err).Class != ClassFinal {
		t.Error("final classification must be preserved through *Error")
	}
}

// The deadline is a minute away and the next delay an hour: Do must give up
// after the first call instead of sleeping into the deadline. Returning
// before the deadline is the proof, and a minute is far beyond any
// scheduling delay on a busy machine.
func TestDoDeadlineGivesUpEarlyWithRealError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := Policy{MaxAttempts: 10, BaseDelay: time.Hour, MaxDelay: time.Hour, JitterMode: JitterNone}
	calls := 0
	err := Do(ctx, p, func(context.Context) error { calls++; return errBoom })
	if ctx.Err() != nil {
		t.Errorf("did not give up early: returned after the deadline")
	}
	if calls != 1 {
		t.Errorf("calls = %d", calls)
	}
	var re *Error
	if !errors.As(err, &re) || re.Reason != ReasonDeadline || re.Err != errBoom {
		t.Fatalf("err = %v", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Error("early give-up must not be a context error")
	}
}

// Only bounds that hold however late the timers fire are asserted: a timer
// never fires early, so Do sleeps at least each delay, and gives up only
// when the next delay would end past MaxElapsed, that is less than one
// delay before it.
func TestDoMaxElapsed(t *testing.T) {
	const delay, maxElapsed = 10 * time.Millisecond, 300 * time.Millisecond
	p := Policy{MaxAttempts: 1 << 20, BaseDelay: delay, Multiplier: 1, JitterMode: JitterNone, MaxElapsed: maxElapsed}
	calls := 0
	var slept time.Duration
	p.OnRetry = func(e Event) { slept += e.Delay }
	start := time.Now()
	err := Do(context.Background(), p, func(context.Context) error { calls++; return errBoom })
	elapsed := time.Since(start)
	var re *Error
	if !errors.As(err, &re) || re.Reason != ReasonMaxElapsed {
		t.Fatalf("err = %v", err)
	}
	if elapsed <= maxElapsed-delay {
		t.Errorf("gave up after %v, more than a delay (%v) before MaxElapsed %v", elapsed, delay, maxElapsed)
	}
	if slept > maxElapsed {
		t.Errorf("slept %v in all, more than MaxElapsed %v", slept, maxElapsed)
	}
	if want := int(maxElapsed/delay) + 1; calls < 2 || calls > want {
		t.Errorf("calls = %d, want 2 to %d", calls, want)
	}
}

func TestDoCallerCancelStopsAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := Policy{MaxAttempts: 5, BaseDelay: time.Hour, MaxDelay: time.Hour, JitterMode: JitterNone}
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	start := time.Now()
	err := Do(ctx, p, func(context.Context) error { return errBoom })
	if time.Since(start) > time.Second {
		t.Fatal("sleep not interrupted")
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errBoom) {
		t.Errorf("err = %v", err)
	}
	// Canceled while the attempt runs: no further attempt.
	ctx2, cancel2 := context.WithCancel(context.Background())
	calls := 0
	err = Do(ctx2, fast(5), func(context.Context) error { calls++; cancel2(); return context.Canceled })
	if calls != 1 || !errors.Is(err, context.Canceled) {
		t.Errorf("calls=%d err=%v", calls, err)
	}
	// Already canceled: no attempt at all.
	calls = 0
	err = Do(ctx2, fast(5), func(context.Context) error { calls++; return nil })
	if calls != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("calls=%d err=%v", calls, err)
	}
}

func TestDoAttemptTimeoutIsRetryable(t *testing.T) {
	calls := 0
	err := Do(context.Background(), fast(3), func(ctx context.Context) error {
		calls++
		actx, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		if calls < 3 {
			<-actx.Done()
			return actx.Err() // the attempt's own timeout
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err=%v calls=%d", err, calls)
	}
}

func TestDoRateLimitedDoesNotConsumeAttempts(t *testing.T) {
	p := fast(2)
	p.BaseDelay = time.Millisecond
	var delays []time.Duration
	p.OnRetry = func(e Event) { delays = append(delays, e.Delay) }
	calls := 0
	err := Do(context.Background(), p, func(context.Context) error {
		calls++
		if calls <= 4 {
			return RateLimited(errBoom, 20*time.Millisecond)
		}
		if calls == 5 {
			return errBoom // consumes 1 of 2 attempts
		}
		return nil
	})
	if err != nil || calls != 6 {
		t.Fatalf("err=%v calls=%d", err, calls)
	}
	for i := 0; i < 4; i++ {
		if delays[i] < 20*time.Millisecond || delays[i] > 22*time.Millisecond {
			t.Errorf("rate-limit delay %d = %v, want Retry-After 20ms + <=10%%", i, delays[i])
		}
	}
}

func TestDoRateLimitWaitsBounded(t *testing.T) {
	p := fast(2)
	p.MaxRateLimitWaits = 3
	calls := 0
	err := Do(context.Background(), p, func(context.Context) error {
		calls++
		return RateLimited(errBoom, time.Millisecond)
	})
	// 3 free waits, then rate-limited failures consume the 2 attempts.
	if calls != 5 {
		t.Errorf("calls = %d, want 5", calls)
	}
	var re *Error
	if !errors.As(err, &re) || re.Reason != ReasonRateLimitWaits || re.Outcome.Class != ClassRateLimited || re.Attempts != 5 {
		t.Errorf("err = %#v", err)
	}
	// Retry-After is capped by MaxRateLimitWait.
	p = fast(2)
	p.MaxRateLimitWait = 5 * time.Millisecond
	start := time.Now()
	calls = 0
	_ = Do(context.Background(), p, func(context.Context) error {
		calls++
		if calls == 1 {
			return RateLimited(errBoom, time.Hour)
		}
		return nil
	})
	if time.Since(start) > time.Second {
		t.Error("Retry-After not capped")
	}
}

// TestNestedLayersDoNotMultiply is the acceptance test: two nested layers of 3 attempts
// around a dependency that always fails make 3 calls, not 9.
func TestNestedLayersDoNotMultiply(t *testing.T) {
	var calls atomic.Int32
	dependency := func(context.Context) error { calls.Add(1); return errBoom }
	inner := func(ctx context.Context) error { return Do(ctx, fast(3), dependency) }
	err := Do(context.Background(), fast(3), inner)
	if n := calls.Load(); n != 3 {
		t.Fatalf("dependency called %d times, want 3", n)
	}
	var re *Error
	if !errors.As(err, &re) || re.Attempts != 3 || !errors.Is(err, errBoom) {
		t.Fatalf("err = %v", err)
	}
	if strings.Count(err.Error(), "after") != 1 {
		t.Errorf("nested error message should not stack: %q", err.Error())
	}

	// Three layers, same rule.
	calls.Store(0)
	_ = Do(context.Background(), fast(3), func(ctx context.Context) error {
		return Do(ctx, fast(4), func(ctx context.Context) error { return Do(ctx, fast(5), dependency) })
	})
	if n := calls.Load(); n != 3 {
		t.Fatalf("three layers: %d calls, want 3", n)
	}

	// An Independent inner layer retries on its own: 3 × 3.
	calls.Store(0)
	indep := fast(3)
	indep.Independent = true
	_ = Do(context.Background(), fast(3), func(ctx context.Context) error { return Do(ctx, indep, dependency) })
	if n := calls.Load(); n != 9 {
		t.Fatalf("independent: %d calls, want 9", n)
	}
}

func TestNestedClassificationPreserved(t *testing.T) {
	// The inner layer knows its dependency: its classifier says "final"; the outer
	// layer must stop at once.
	errDenied := errors.New("access denied")
	innerP := fast(3)
	innerP.Classifier = Is(errDenied, ClassFinal)
	calls := 0
	err := Do(context.Background(), fast(5), func(ctx context.Context) error {
		return Do(ctx, innerP, func(context.Context) error { calls++; return errDenied })
	})
	if calls != 1 || Classify(err).Class != ClassFinal || !errors.Is(err, errDenied) {
		t.Fatalf("calls=%d err=%v class=%v", calls, err, Classify(err).Class)
	}
	// Rate limits reported by the inner layer are honoured by the outer one.
	calls = 0
	err = Do(context.Background(), fast(1), func(ctx context.Context) error {
		return Do(ctx, fast(3), func(context.Context) error {
			calls++
			if calls == 1 {
				return RateLimited(errBoom, time.Millisecond)
			}
			return nil
		})
	})
	if err != nil || calls != 2 {
		t.Fatalf("rate limited nested: calls=%d err=%v", calls, err)
	}
}

func TestDoBudget(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBudget(BudgetOptions{Ratio: 0.5, MinPerSecond: -1, Window: 10 * time.Second, Now: func() time.Time { return now }})
	p := fast(3)
	p.Budget = b
	// Healthy traffic: 4 successful calls earn 2 retries.
	for range 4 {
		if err := Do(context.Background(), p, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	calls := 0
	err := Do(context.Background(), p, func(context.Context) error { calls++; return errBoom })
	// 5 requests × 0.5 = 2.5: the 2 retries are granted.
	if calls != 3 || !errors.Is(err, errBoom) {
		t.Fatalf("calls = %d, err = %v", calls, err)
	}
	calls = 0
	err = Do(context.Background(), p, func(context.Context) error { calls++; return errBoom })
	// 6 × 0.5 = 3 ≥ 2+1: one retry granted, then refused.
	if calls != 2 {
		t.Fatalf("calls = %d", calls)
	}
	if !errors.Is(err, ErrBudgetExhausted) || !errors.Is(err, errBoom) || Classify(err).Class != ClassRetryable {
		t.Fatalf("err = %v", err)
	}
	var re *Error
	if errors.As(err, &re); re.Reason != ReasonBudget {
		t.Errorf("reason %q", re.Reason)
	}
	req, ret := b.Stats()
	if req != 6 || ret != 3 {
		t.Errorf("stats %v %v", req, ret)
	}
}

func TestDoBreakerOpenSkipsOp(t *testing.T) {
	now := time.Unix(1000, 0)
	br := NewBreaker(BreakerOptions{ConsecutiveFailures: 2, OpenFor: time.Minute, Now: func() time.Time { return now }})
	p := fast(5)
	p.Breaker = br
	calls := 0
	err := Do(context.Background(), p, func(context.Context) error { calls++; return errBoom })
	if calls != 2 || !errors.Is(err, ErrCircuitOpen) || !errors.Is(err, errBoom) {
		t.Fatalf("calls=%d err=%v", calls, err)
	}
	calls = 0
	err = Do(context.Background(), p, func(context.Context) error { calls++; return nil })
	if calls != 0 || !errors.Is(err, ErrCircuitOpen) || Classify(err).Class != ClassRetryable {
		t.Fatalf("open breaker: calls=%d err=%v", calls, err)
	}
	now = now.Add(time.Minute)
	if err := Do(context.Background(), p, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if br.State() != BreakerClosed {
		t.Errorf("state %v", br.State())
	}
	// Final errors do not trip it.
	for range 5 {
		_ = Do(context.Background(), p, func(context.Context) error { return Final(errBoom) })
	}
	if br.State() != BreakerClosed {
		t.Errorf("final errors tripped the breaker")
	}
}

func TestDoAllocsSuccess(t *testing.T) {
	p := Policy{Budget: NewBudget(BudgetOptions{}), Breaker: NewBreaker(BreakerOptions{})}
	op := func(context.Context) error { return nil }
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { _ = Do(ctx, p, op) }); n != 0 {
		t.Errorf("Do(Background) allocs = %v, want 0", n)
	}
	sctx := Scope(context.WithValue(context.Background(), struct{ k int }{1}, "request"))
	if n := testing.AllocsPerRun(1000, func() { _ = Do(sctx, p, op) }); n != 0 {
		t.Errorf("Do(Scope) allocs = %v, want 0", n)
	}
	vop := func(context.Context) (int, error) { return 1, nil }
	if n := testing.AllocsPerRun(1000, func() { _, _ = DoValue(ctx, p, vop) }); n != 0 {
		t.Errorf("DoValue allocs = %v, want 0", n)
	}
	// Nested Do on the success path.
	nested := func(ctx context.Context) error { return Do(ctx, p, op) }
	if n := testing.AllocsPerRun(1000, func() { _ = Do(ctx, p, nested) }); n != 0 {
		t.Errorf("nested Do allocs = %v, want 0", n)
	}
	// A request context that is neither: one small context for the marker.
	rctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if n := testing.AllocsPerRun(1000, func() { _ = Do(rctx, p, op) }); n > 1 {
		t.Errorf("Do(request ctx) allocs = %v, want <= 1", n)
	}
}

func TestScope(t *testing.T) {
	type key struct{}
	base := context.WithValue(context.Background(), key{}, "v")
	s := Scope(base)
	if InNested(s) {
		t.Error("a scope is not nested")
	}
	calls := 0
	_ = Do(s, fast(3), func(ctx context.Context) error {
		if !InNested(ctx) || ctx.Value(key{}) != "v" {
			t.Error("inside ctx lost marker or values")
		}
		return Do(ctx, fast(3), func(context.Context) error { calls++; return errBoom })
	})
	if calls != 3 {
		t.Errorf("calls = %d", calls)
	}
	// Deadlines of a context derived from a scope are honoured.
	dctx, cancel := context.WithTimeout(s, 50*time.Millisecond)
	defer cancel()
	_ = Do(dctx, fast(1), func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("derived deadline lost")
		}
		return nil
	})
}

// TestDoRateLimitedWithoutRetryAfterGrows: successive rate-limited failures
// without Retry-After wait longer and longer, through the free waits and on
// after they are spent (the wait used to fall back to the first delay once
// rate limits began to consume attempts).
func TestDoRateLimitedWithoutRetryAfterGrows(t *testing.T) {
	p := Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Second, JitterMode: JitterNone, MaxRateLimitWaits: 3}
	var delays []time.Duration
	p.OnRetry = func(e Event) { delays = append(delays, e.Delay) }
	calls := 0
	err := Do(context.Background(), p, func(context.Context) error {
		calls++
		return RateLimited(errBoom, 0)
	})
	// 3 free waits, then 3 attempts consumed: 6 calls, 5 waits.
	if calls != 6 || !errors.Is(err, errBoom) {
		t.Fatalf("calls = %d, err = %v", calls, err)
	}
	ms := time.Millisecond
	want := []time.Duration{ms, 2 * ms, 4 * ms, 8 * ms, 16 * ms}
	if fmt.Sprint(delays) != fmt.Sprint(want) {
		t.Fatalf("waits %v, want %v", delays, want)
	}
}

// TestDoRateLimitedNeverBeforeRetryAfter: once the free waits are spent, a
// rate-limited failure still waits at least its Retry-After.
func TestDoRateLimitedNeverBeforeRetryAfter(t *testing.T) {
	p := Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, JitterMode: JitterNone, MaxRateLimitWaits: 1}
	var delays []time.Duration
	p.OnRetry = func(e Event) { delays = append(delays, e.Delay) }
	_ = Do(context.Background(), p, func(context.Context) error { return RateLimited(errBoom, 15*time.Millisecond) })
	if len(delays) != 3 {
		t.Fatalf("waits %v, want 3 (1 free, 2 counted)", delays)
	}
	for i, d := range delays {
		if d < 15*time.Millisecond {
			t.Errorf("wait %d = %v, sooner than Retry-After 15ms", i+1, d)
		}
	}
}
