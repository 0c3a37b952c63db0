package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redrive/redrive/retry"
)

func ExampleDo() {
	calls := 0
	p := retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, JitterMode: retry.JitterNone}
	err := retry.Do(context.Background(), p, func(ctx context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("connection reset")
		}
		return nil
	})
	fmt.Println(calls, err)

	err = retry.Do(context.Background(), p, func(ctx context.Context) error {
		return retry.Final(errors.New("invalid input"))
	})
	fmt.Println(err)
	// Output:
	// 3 <nil>
	// after 1 attempt: invalid input (final error)
}

func ExampleDoValue() {
	p := retry.Policy{MaxAttempts: 2, BaseDelay: time.Millisecond}
	n := 0
	v, err := retry.DoValue(context.Background(), p, func(ctx context.Context) (string, error) {
		n++
		if n == 1 {
			return "", retry.RateLimited(errors.New("429 Too Many Requests"), time.Millisecond)
		}
		return "summary", nil
	})
	fmt.Println(v, err, n)
	// Output: summary <nil> 2
}

// fixed is an injected Source returning the middle of every jitter range.
type fixed float64

func (f fixed) Float64() float64 { return float64(f) }

func ExamplePolicy_Delay() {
	// ADR-0010: 4 attempts, 30s × 4^n, ±20% jitter, no cap below 480s.
	p := retry.Policy{MaxAttempts: 4, BaseDelay: 30 * time.Second, Multiplier: 4,
		MaxDelay: 10 * time.Minute, Jitter: 0.2, Rand: fixed(0.75)}
	for a := 1; a < p.Attempts(); a++ {
		lo, hi := p.Bounds(a)
		fmt.Printf("before attempt %d: %v in [%v, %v], drawn %v\n", a+1, p.Nominal(a), lo, hi, p.Delay(a))
	}
	// Output:
	// before attempt 2: 30s in [24s, 36s], drawn 33s
	// before attempt 3: 2m0s in [1m36s, 2m24s], drawn 2m12s
	// before attempt 4: 8m0s in [6m24s, 9m36s], drawn 8m48s
}

func ExampleBreaker() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := retry.NewBreaker(retry.BreakerOptions{
		ConsecutiveFailures: 2,
		OpenFor:             30 * time.Second,
		Now:                 func() time.Time { return now },
		OnStateChange:       func(from, to retry.BreakerState) { fmt.Println(from, "->", to) },
	})
	p := retry.Policy{MaxAttempts: 5, BaseDelay: time.Millisecond, Breaker: b}
	err := retry.Do(context.Background(), p, func(ctx context.Context) error { return errors.New("503") })
	fmt.Println(errors.Is(err, retry.ErrCircuitOpen))

	now = now.Add(30 * time.Second)
	fmt.Println(b.State())
	err = retry.Do(context.Background(), p, func(ctx context.Context) error { return nil })
	fmt.Println(err, b.State())
	// Output:
	// closed -> open
	// true
	// open -> half_open
	// half_open
	// half_open -> closed
	// <nil> closed
}

func Example_nested() {
	calls := 0
	dependency := func(ctx context.Context) error { calls++; return errors.New("unavailable") }
	p := retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond}
	_ = retry.Do(context.Background(), p, func(ctx context.Context) error {
		return retry.Do(ctx, p, dependency) // nested: one attempt per outer attempt
	})
	fmt.Println(calls)
	// Output: 3
}
