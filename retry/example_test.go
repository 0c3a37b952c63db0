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
	// gave up after 1 attempt (final error): invalid input
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

// Example_layers is ADR-001's layered retry: an infrastructure layer (BigQuery) retries
// timeouts silently and owns them; a workflow layer, outside it, retries business
// failures (a query to write again) where the user sees it. When BigQuery stays down the
// infrastructure layer's 3 attempts are all: the workflow does not repeat them (3 calls,
// not 9), and the error says which layer gave up.
func Example_layers() {
	errTimeout := errors.New("timeoutExceeded")
	errInvalid := errors.New("invalidQuery")
	bigquery := retry.Policy{
		Name:        "bigquery",
		MaxAttempts: 3, BaseDelay: time.Millisecond, JitterMode: retry.JitterNone,
		Independent: true,                 // retries on its own inside the workflow's Do
		Exhausted:   retry.ExhaustedFinal, // and what it gave up on, the workflow must not retry
		// Only infrastructure failures are its business; anything else stops it at once.
		Classifier: retry.Chain(retry.ClassFinal, retry.Is(errTimeout, retry.ClassRetryable), retry.Network),
	}
	workflow := retry.Policy{
		Name:        "workflow",
		MaxAttempts: 3, BaseDelay: time.Millisecond, JitterMode: retry.JitterNone,
		OnRetry: func(e retry.Event) { fmt.Printf("  %s: attempt %d failed: %v\n", e.Layer, e.Attempt, e.Err) },
	}

	run := func(answers ...error) {
		calls := 0
		execute := func(ctx context.Context) error { // the BigQuery call
			err := answers[min(calls, len(answers)-1)]
			calls++
			return err
		}
		err := retry.Do(context.Background(), workflow, func(ctx context.Context) error {
			// (generate the SQL here)
			err := retry.Do(ctx, bigquery, execute)
			if errors.Is(err, errInvalid) {
				// A business failure: the workflow can write a better query.
				return retry.Retryable(fmt.Errorf("query issue: %w", err))
			}
			return err
		})
		fmt.Printf("%d calls: %v\n", calls, err)
	}
	fmt.Println("BigQuery stays down:")
	run(errTimeout)
	fmt.Println("BigQuery answers invalidQuery twice, then the third query runs:")
	run(errInvalid, errInvalid, nil)
	// Output:
	// BigQuery stays down:
	// 3 calls: workflow: bigquery: gave up after 3 attempts (attempts exhausted): timeoutExceeded
	// BigQuery answers invalidQuery twice, then the third query runs:
	//   workflow: attempt 1 failed: query issue: bigquery: gave up after 1 attempt (final error): invalidQuery
	//   workflow: attempt 2 failed: query issue: bigquery: gave up after 1 attempt (final error): invalidQuery
	// 3 calls: <nil>
}
