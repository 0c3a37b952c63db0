package retry

import (
	"context"
	"time"
)

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
	// counted: failures that consumed an attempt; rlWaits: rate-limited waits that did
	// not; rateLimited: all rate-limited failures, which space the waits without a
	// Retry-After.
	counted, rlWaits, rateLimited, calls := 0, 0, 0, 0
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
		if o.Class == ClassRateLimited {
			rateLimited++
		}
		switch {
		case o.Class == ClassFinal:
			return zero, p.giveUp(calls, err, o, ReasonFinal, nil)
		case o.Class == ClassRateLimited && rlWaits < p.maxRateLimitWaits():
			rlWaits++
			delay = p.rateLimitDelay(o.RetryAfter, rateLimited)
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
				// Allowance spent or not, the waits keep growing and never
				// undercut the Retry-After.
				delay = p.rateLimitDelay(o.RetryAfter, rateLimited)
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
			p.OnRetry(Event{Attempt: calls, Err: err, Outcome: o, Delay: delay, Layer: p.Name})
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

// giveUp builds Do's error and calls OnGiveUp.
func (p *Policy) giveUp(calls int, err error, o Outcome, reason string, cause error) *Error {
	e := &Error{Layer: p.Name, Attempts: calls, Outcome: p.exhausted(o, reason), Err: err, Reason: reason, Cause: cause}
	if p.OnGiveUp != nil {
		p.OnGiveUp(Event{Attempt: calls, Err: err, Outcome: o, Layer: p.Name, Reason: reason})
	}
	return e
}
