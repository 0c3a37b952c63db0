package retry

import (
	"context"
	"errors"
	"fmt"
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
// (Unwrap), so errors.Is/As see through it, and carries that error's classification
// (RetryClass), so an outer layer or a durable queue can decide what to do next.
type Error struct {
	// Attempts is the number of attempts made, rate-limited ones included.
	Attempts int
	// Outcome is the classification of Err; ClassRetryable when Do stopped because of the
	// budget, the breaker or a deadline.
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

// Error returns "after N attempts: <last error> (<reason>)".
func (e *Error) Error() string {
	s := "s"
	if e.Attempts == 1 {
		s = ""
	}
	if e.Cause != nil && e.Cause != e.Err {
		return fmt.Sprintf("after %d attempt%s: %v (%s: %v)", e.Attempts, s, e.Err, e.Reason, e.Cause)
	}
	return fmt.Sprintf("after %d attempt%s: %v (%s)", e.Attempts, s, e.Err, e.Reason)
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

type nestKey struct{}

// markers stored under nestKey.
const (
	markInside = 1 // ctx was passed by Do to its operation
	markScope  = 2 // ctx was made by Scope; Value(nestKey) of its child is markInside
)

type scopeCtx struct {
	context.Context
	inside context.Context
}

func (c *scopeCtx) Value(key any) any {
	if _, ok := key.(nestKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// Precomputed marked children of the two root contexts (immutable).
var (
	insideBackground = context.WithValue(context.Background(), nestKey{}, markInside)
	insideTODO       = context.WithValue(context.TODO(), nestKey{}, markInside)
)

// InNested reports whether ctx was passed by Do to its operation, that is whether a Do
// called with ctx would be nested (see the package documentation).
func InNested(ctx context.Context) bool {
	v, _ := ctx.Value(nestKey{}).(int)
	return v == markInside
}

// Scope returns a context for hot loops: Do called with it (or a context derived from it
// that adds no values) does not allocate to mark the context it passes to its operation.
// Do normally allocates one small context per call for that marker, except for
// context.Background() and context.TODO(). Scope does not itself make Do nested.
func Scope(ctx context.Context) context.Context {
	if InNested(ctx) {
		return ctx
	}
	return &scopeCtx{Context: ctx, inside: context.WithValue(ctx, nestKey{}, markInside)}
}

// Layer returns a context in which Do is nested, for an outer retry layer
// that is not itself a Do — redrive's durable engine passes one to every
// stage handler. Do called with it (and not Independent) makes one attempt
// per outer attempt and returns the error with its classification, leaving
// retrying to the outer layer, so the two layers do not multiply calls.
func Layer(ctx context.Context) context.Context {
	if InNested(ctx) {
		return ctx
	}
	return context.WithValue(ctx, nestKey{}, markInside)
}

// insideCtx returns the context Do passes to its operation.
func insideCtx(ctx context.Context) context.Context {
	switch ctx {
	case context.Background():
		return insideBackground
	case context.TODO():
		return insideTODO
	}
	switch v := ctx.Value(nestKey{}).(type) {
	case int:
		if v == markInside {
			return ctx
		}
	case *scopeCtx:
		if v == ctx { // only the scope itself; derived contexts may add deadlines
			return v.inside
		}
	}
	return context.WithValue(ctx, nestKey{}, markInside)
}

// Do calls op until it succeeds, returns a final error, or the policy gives up; it then
// returns nil or an *Error wrapping the last error. See the package documentation for
// the rules (classification, rate limits, context, nested layers, budget, breaker).
// On the success path Do does not allocate when ctx is context.Background(),
// context.TODO(), a context from Scope or one passed by an outer Do.
func Do(ctx context.Context, p Policy, op func(ctx context.Context) error) error {
	_, err := doValue(ctx, &p, func(ctx context.Context) (struct{}, error) { return struct{}{}, op(ctx) })
	return err
}

// DoValue is Do for operations that return a value; it returns the value of the
// successful attempt, or the zero T and Do's error.
func DoValue[T any](ctx context.Context, p Policy, op func(ctx context.Context) (T, error)) (T, error) {
	return doValue(ctx, &p, op)
}

// breakerKind maps an outcome to what the breaker records.
func breakerRecord(b *Breaker, ctx context.Context, err error, o Outcome) {
	if b == nil {
		return
	}
	switch {
	case err == nil || o.Class == ClassFinal:
		b.record(recSuccess)
	case ctx.Err() != nil: // the caller gave up; says nothing about the dependency
		b.record(recIgnore)
	default:
		b.record(recFailure)
	}
}

func doValue[T any](ctx context.Context, p *Policy, op func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, p.giveUp(0, err, Outcome{}, ReasonCanceled, err)
	}
	if !p.Independent && InNested(ctx) {
		return nestedOnce(ctx, p, op)
	}
	inner := insideCtx(ctx)
	var start time.Time
	if p.MaxElapsed > 0 {
		start = time.Now()
	}
	deadline, hasDeadline := ctx.Deadline()
	maxAttempts := p.attempts()
	counted, rlWaits, calls := 0, 0, 0
	var lastErr error
	if p.Budget != nil {
		p.Budget.OnRequest()
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if p.Breaker != nil {
			if err := p.Breaker.Allow(); err != nil {
				if lastErr == nil {
					return zero, p.giveUp(calls, err, Outcome{}, ReasonCircuitOpen, err)
				}
				return zero, p.giveUp(calls, lastErr, Outcome{Class: ClassRetryable}, ReasonCircuitOpen, err)
			}
		}
		v, err := op(inner)
		calls++
		if err == nil {
			breakerRecord(p.Breaker, ctx, nil, Outcome{})
			return v, nil
		}
		o := p.classify(err)
		breakerRecord(p.Breaker, ctx, err, o)
		lastErr = err
		if cerr := ctx.Err(); cerr != nil {
			return zero, p.giveUp(calls, err, o, ReasonCanceled, cerr)
		}
		var delay time.Duration
		switch {
		case o.Class == ClassFinal:
			return zero, p.giveUp(calls, err, o, ReasonFinal, nil)
		case o.Class == ClassRateLimited && rlWaits < p.maxRateLimitWaits():
			rlWaits++
			delay = p.rateLimitDelay(o.RetryAfter, rlWaits)
		default:
			counted++
			if counted >= maxAttempts {
				reason := ReasonAttempts
				if o.Class == ClassRateLimited {
					reason = ReasonRateLimitWaits
				}
				return zero, p.giveUp(calls, err, o, reason, nil)
			}
			if o.Class == ClassRateLimited {
				delay = p.rateLimitDelay(o.RetryAfter, counted)
			} else {
				delay = p.delay(counted)
			}
		}
		if p.MaxElapsed > 0 && time.Since(start)+delay > p.MaxElapsed {
			return zero, p.giveUp(calls, err, o, ReasonMaxElapsed, nil)
		}
		if hasDeadline && time.Until(deadline) <= delay {
			return zero, p.giveUp(calls, err, o, ReasonDeadline, nil)
		}
		if p.Budget != nil && !p.Budget.TryRetry() {
			return zero, p.giveUp(calls, err, Outcome{Class: ClassRetryable}, ReasonBudget, ErrBudgetExhausted)
		}
		if p.OnRetry != nil {
			p.OnRetry(Event{Attempt: calls, Err: err, Outcome: o, Delay: delay})
		}
		if delay > 0 {
			if timer == nil {
				timer = time.NewTimer(delay)
			} else {
				timer.Reset(delay)
			}
			select {
			case <-ctx.Done():
				return zero, p.giveUp(calls, err, o, ReasonCanceled, ctx.Err())
			case <-timer.C:
			}
		}
	}
}

// nestedOnce is Do inside another Do: one attempt, classification preserved.
func nestedOnce[T any](ctx context.Context, p *Policy, op func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if p.Budget != nil {
		p.Budget.OnRequest()
	}
	if p.Breaker != nil {
		if err := p.Breaker.Allow(); err != nil {
			return zero, &Error{Err: err, Cause: err, Reason: ReasonCircuitOpen}
		}
	}
	v, err := op(ctx)
	if err == nil {
		breakerRecord(p.Breaker, ctx, nil, Outcome{})
		return v, nil
	}
	o := p.classify(err)
	breakerRecord(p.Breaker, ctx, err, o)
	if _, ok := Explicit(err); ok {
		return zero, err
	}
	return zero, &classedError{err: err, class: o.Class, after: o.RetryAfter}
}

// giveUp builds Do's error and calls OnGiveUp.
func (p *Policy) giveUp(calls int, err error, o Outcome, reason string, cause error) *Error {
	e := &Error{Attempts: calls, Outcome: o, Err: err, Reason: reason, Cause: cause}
	if p.OnGiveUp != nil {
		p.OnGiveUp(Event{Attempt: calls, Err: err, Outcome: o})
	}
	return e
}
