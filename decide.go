package redrive

import (
	"errors"
	"fmt"
	"time"

	"github.com/redrive/redrive/retry"
)

// decide turns an attempt's result into the item's next state.
func (e *engine) decide(t *task, p retry.Policy, out []byte, err error, o retry.Outcome, start, end time.Time) {
	it := &t.lease.Item
	number := it.Attempt + 1
	rec := Attempt{
		ItemID: it.ID, RunID: it.RunID, Pipeline: it.Pipeline, Stage: it.Stage, StageIndex: it.StageIndex,
		Number: number, StartedAt: start, FinishedAt: end,
	}
	if t.pipeline != nil {
		rec.ConfigHash = t.pipeline.configHash(t.stage)
	}
	c := Completion{ItemID: it.ID, Token: t.lease.Token, Now: end, Stage: it.Stage, StageIndex: it.StageIndex,
		Attempt: it.Attempt, RateLimitWaits: it.RateLimitWaits, FailedAttempts: it.FailedAttempts}
	finished := AttemptFinished{Pipeline: it.Pipeline, Stage: it.Stage, RunID: it.RunID, ItemID: it.ID,
		Attempt: number, Duration: end.Sub(start)}
	abortReason, aborted := e.abortedRun(it.RunID)
	// next makes the event after finished, if any: made only for
	// observers, as boxing it costs an allocation.
	var next func() Event

	switch {
	case err == nil:
		rec.Outcome = OutcomeSucceeded
		c.Attempt, c.RateLimitWaits = 0, 0
		if out == nil {
			out = []byte{}
		}
		c.Payload = out
		if t.stage+1 < len(t.pipeline.Stages) && !aborted {
			c.State = StatePending
			c.StageIndex = t.stage + 1
			c.Stage = t.pipeline.Stages[t.stage+1].Name
			c.NextAt = end
		} else if t.stage+1 < len(t.pipeline.Stages) {
			c.State = StateCanceled
			c.StageIndex = t.stage + 1
			c.Stage = t.pipeline.Stages[t.stage+1].Name
			c.Reason = &Reason{Stage: c.Stage, Class: ClassCanceled, Error: abortReason, At: end}
		} else {
			c.State = StateSucceeded
			next = func() Event {
				return ItemSucceeded{Pipeline: it.Pipeline, RunID: it.RunID, ItemID: it.ID, EnqueuedAt: it.EnqueuedAt, At: end}
			}
		}
	default:
		msg := errorMessage(err)
		rec.Error, rec.Class = msg, o.Class.String()
		if errors.Is(err, errLost) {
			rec.Class = ClassLost
		}
		waits := p.MaxRateLimitWaits
		if waits == 0 {
			waits = retry.DefaultMaxRateLimitWaits
		}
		rateLimited := o.Class == retry.ClassRateLimited
		counts := t.stage >= 0 && t.pipeline.Stages[t.stage].CountRateLimitWaits
		switch {
		case o.Class == retry.ClassFinal:
			rec.Outcome = OutcomeDead
			c.Attempt = number
		case rateLimited && !counts && t.stageLimited:
			// The whole stage was pushed back (flow.go): the item waits
			// in the queue at no cost to its attempts or its allowance.
			rec.Outcome = OutcomeRateLimited
			rec.Delay = t.stageDelay
		case rateLimited && !counts && it.RateLimitWaits < waits:
			rec.Outcome = OutcomeRateLimited
			rec.Number = number // recorded, but the counter does not move
			// The delay grows with the item's waits (a 429 without
			// Retry-After); it is never shorter than the Retry-After.
			rec.Delay = p.RateLimitDelay(o.RetryAfter, it.RateLimitWaits+1)
			c.RateLimitWaits = it.RateLimitWaits + 1
		case t.probe && o.Class != retry.ClassFinal:
			// The probe of a half-open breaker failed: the dependency is
			// still down, which is no fault of this item, so the attempt
			// is recorded without consuming the item's allowance.
			rec.Outcome = OutcomeRetry
			rec.Delay = p.Delay(max(it.Attempt, 1))
		case number < p.Attempts():
			rec.Outcome = OutcomeRetry
			rec.Delay = p.Delay(number)
			if rateLimited {
				// A rate-limited failure that uses up an attempt still
				// waits as long as the dependency asked.
				rec.Delay = p.RateLimitDelay(o.RetryAfter, number)
			}
			c.Attempt = number
			if p.Budget != nil && !p.Budget.TryRetry() {
				rec.Delay = max(rec.Delay, budgetDelay(p))
			}
		default:
			rec.Outcome = OutcomeDead
			c.Attempt = number
		}
		capReached := false
		if c.Attempt == number {
			// The attempt used up one of its stage's: it is one of the
			// item's attempts of the whole pipeline.
			c.FailedAttempts = it.FailedAttempts + 1
			if n := t.pipeline.maxAttempts(); n > 0 && c.FailedAttempts >= n && rec.Outcome != OutcomeDead {
				rec.Outcome, rec.Delay, capReached = OutcomeDead, 0, true
			}
		}
		if o.RetryAfter > 0 && rec.Outcome != OutcomeDead {
			// No call goes out sooner than the dependency asked, whatever
			// allowance is left.
			rec.Delay = max(rec.Delay, o.RetryAfter)
		}
		if errors.Is(err, errLost) && rec.Outcome != OutcomeDead {
			rec.Outcome = OutcomeLost
		}
		switch {
		case rec.Outcome == OutcomeDead:
			c.State = StateDead
			class := rec.Class
			if errors.Is(err, errLost) {
				rec.Outcome = OutcomeLost
			}
			reason := msg
			if capReached {
				reason = fmt.Sprintf("attempt cap of %d across stages reached: %s", c.FailedAttempts, msg)
			}
			c.Reason = &Reason{Stage: it.Stage, Class: class, Error: reason, Attempts: c.Attempt, At: end}
			next = func() Event {
				return DeadLettered{Pipeline: it.Pipeline, RunID: it.RunID, ItemID: it.ID, Reason: *c.Reason}
			}
		case aborted:
			c.State = StateCanceled
			c.Reason = &Reason{Stage: it.Stage, Class: ClassCanceled, Error: abortReason, Attempts: c.Attempt, At: end}
		default:
			c.State = StatePending
			c.NextAt = end.Add(rec.Delay)
			finished.Delay = rec.Delay
			next = func() Event {
				return RetryScheduled{Pipeline: it.Pipeline, Stage: it.Stage, RunID: it.RunID, ItemID: it.ID,
					Attempt: number, Delay: rec.Delay, RateLimited: rec.Outcome == OutcomeRateLimited}
			}
		}
	}
	c.Record = rec
	t.comp = c
	if len(e.cfg.Observers) == 0 {
		// Nobody would see the events: an item's two would cost more to
		// build than the rest of its decision.
		return
	}
	finished.Outcome, finished.Class, finished.Error = rec.Outcome, rec.Class, rec.Error
	evs := make([]Event, 0, 2+len(t.events))
	evs = append(evs, finished)
	if next != nil {
		evs = append(evs, next())
	}
	t.events = append(evs, t.events...)
}

// maxAttempts is p.MaxAttempts, or 0 (no cap) for an unknown pipeline.
func (p *Pipeline) maxAttempts() int {
	if p == nil {
		return 0
	}
	return p.MaxAttempts
}

// maxErrorLen bounds a stored error message.
const maxErrorLen = 4096

func errorMessage(err error) string {
	msg := err.Error()
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen] + "…"
	}
	return msg
}

// setAbortedLocked records run id as aborted for reason, or, without
// aborted, no longer. e.mu is held.
func (e *engine) setAbortedLocked(id int64, reason string, aborted bool) {
	if aborted {
		e.aborted[id] = reason
	} else {
		delete(e.aborted, id)
	}
	e.abortedRuns.Store(int64(len(e.aborted)))
}

// abortedRun reports whether run id is aborted, and why.
func (e *engine) abortedRun(id int64) (string, bool) {
	if e.abortedRuns.Load() == 0 {
		return "", false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.aborted[id]
	return r, ok
}

// budgetDelay is the least delay of a retry that the stage's retry budget
// refused: the policy's MaxDelay (default 60 s), at most 10 minutes.
func budgetDelay(p retry.Policy) time.Duration {
	d := p.MaxDelay
	if d <= 0 {
		d = retry.DefaultMaxDelay
	}
	return min(d, 10*time.Minute)
}
