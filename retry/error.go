package retry

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Event describes one retry decision, passed to Policy.OnRetry and Policy.OnGiveUp.
type Event struct {
	// Attempt is the number of attempts made so far (1-based), rate-limited ones included.
	Attempt int
	// Err is the error of the last attempt (for OnGiveUp without any attempt, the reason).
	Err error
	// Outcome is the classification of Err.
	Outcome Outcome
	// Delay is the sleep before the next attempt (OnRetry); 0 for OnGiveUp.
	Delay time.Duration
	// Layer is the Name of the policy; empty if it has none.
	Layer string
	// Reason says why Do gave up (OnGiveUp: one of the Reason constants); empty for OnRetry.
	Reason string
}

// Reasons found in Error.Reason.
const (
	ReasonFinal          = "final error"
	ReasonAttempts       = "attempts exhausted"
	ReasonMaxElapsed     = "max elapsed time reached"
	ReasonDeadline       = "next attempt would pass the context deadline"
	ReasonCanceled       = "context done"
	ReasonBudget         = "retry budget exhausted"
	ReasonCircuitOpen    = "circuit open"
	ReasonRateLimitWaits = "rate-limit waits exhausted"
)

// Error is returned by Do when it gives up. It wraps the last error an attempt returned
// (Unwrap), so errors.Is/As see through it, and carries the classification that an outer
// layer should apply (RetryClass), so an outer layer or a durable queue can decide what
// to do next.
type Error struct {
	// Layer is the Name of the policy that gave up; empty if it had none.
	Layer string
	// Attempts is the number of attempts made, rate-limited ones included.
	Attempts int
	// Outcome is how an outer layer classifies this error: the classification of Err,
	// ClassRetryable when Do stopped because of the budget, the breaker or a deadline, or
	// what Policy.Exhausted says when the layer's own allowance ran out.
	Outcome Outcome
	// Err is the last error an attempt returned. It is never a context error when Do gave
	// up early because the next attempt would pass ctx's deadline. When no attempt was
	// made it is Cause.
	Err error
	// Reason says why Do stopped (one of the Reason constants).
	Reason string
	// Cause is what stopped Do before its attempts ran out: ErrBudgetExhausted,
	// ErrCircuitOpen or the context's error; nil otherwise. errors.Is matches it too.
	Cause error
}

// Error returns "<layer>: gave up after N attempts (<reason>): <last error>", or
// "<layer>: no attempt made (<reason>)". When the last error is an inner layer's *Error
// that was final for this layer after one attempt, it returns "<layer>: <inner error>":
// the inner layer's account says it all, and nested layers read as a path
// ("workflow: bigquery: gave up after 3 attempts (attempts exhausted): timeout").
func (e *Error) Error() string {
	var b strings.Builder
	if e.Layer != "" {
		b.WriteString(e.Layer)
		b.WriteString(": ")
	}
	if e.Attempts == 1 && e.Reason == ReasonFinal && e.Err != nil {
		if _, ok := errors.AsType[*Error](e.Err); ok {
			b.WriteString(e.Err.Error())
			return b.String()
		}
	}
	switch e.Attempts {
	case 0:
		b.WriteString("no attempt made")
	case 1:
		b.WriteString("gave up after 1 attempt")
	default:
		fmt.Fprintf(&b, "gave up after %d attempts", e.Attempts)
	}
	b.WriteString(" (")
	b.WriteString(e.Reason)
	// The package's own causes are what the reason says; a context's error
	// tells canceled from deadline exceeded.
	if e.Cause != nil && !errors.Is(e.Cause, ErrBudgetExhausted) && !errors.Is(e.Cause, ErrCircuitOpen) {
		b.WriteString(": ")
		b.WriteString(e.Cause.Error())
	}
	b.WriteString(")")
	if e.Err != nil && e.Err != e.Cause {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns Err, the last real error.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target matches Cause (ErrBudgetExhausted, ErrCircuitOpen, a context
// error), so errors.Is(err, ErrCircuitOpen) works while Unwrap still returns the last error.
func (e *Error) Is(target error) bool {
	return e.Cause != nil && target != nil && errors.Is(e.Cause, target)
}

// RetryClass implements ClassedError with Outcome.
func (e *Error) RetryClass() (Class, time.Duration) { return e.Outcome.Class, e.Outcome.RetryAfter }
