package redrive

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/redrive/redrive/retry"
)

func (e *engine) workLoop() {
	defer e.workers.Done()
	w := e.newWorkerCtx()
	defer w.cancel()
	for t := range e.work {
		e.busy.Add(1)
		e.unstarted.Add(-1)
		if e.claimCtx.Err() != nil {
			// Stopping: items not started go back at once.
			t.release = true
		} else {
			e.attempt(t, w)
		}
		e.completions <- t
		// A free worker may want an item: the claimer decides.
		e.busy.Add(-1)
		e.wake()
	}
}

// errLost is the error recorded for an attempt whose worker vanished.
var errLost = errors.New("lease expired: the worker running the attempt vanished")

// workerCtx holds a worker's parents of its attempts' contexts, under a
// cancelable child of the engine's workCtx of the worker's own. An
// attempt's context is its parent's child until the attempt ends; with one
// parent shared by every worker, each attempt took and released the lock
// of that parent's list of children, which all the workers contend for.
type workerCtx struct {
	cancel context.CancelFunc
	// layer marks the calls as made inside an outer retry layer, the
	// engine; unpaced adds that no flow paces them (retry.Paced with nil),
	// and paced that a stage's flow does.
	layer   context.Context
	unpaced context.Context
	paced   map[*flow]context.Context
}

func (e *engine) newWorkerCtx() *workerCtx {
	ctx, cancel := context.WithCancel(e.workCtx)
	layer := retry.Layer(ctx)
	return &workerCtx{cancel: cancel, layer: layer, unpaced: retry.Paced(layer, nil), paced: map[*flow]context.Context{}}
}

// base is the parent of an attempt of t's stage: the stage's flow paces
// the calls made with it (retry.Paced).
func (w *workerCtx) base(t *task) context.Context {
	f := t.flow
	if f == nil || !f.paces {
		return w.unpaced
	}
	ctx := w.paced[f]
	if ctx == nil {
		ctx = retry.Paced(w.layer, f)
		w.paced[f] = ctx
	}
	return ctx
}

// attempt runs the handler of t's stage and decides what follows.
func (e *engine) attempt(t *task, w *workerCtx) {
	it := &t.lease.Item
	if t.stage < 0 {
		err := retry.Final(fmt.Errorf("stage %q is not in pipeline %q", it.Stage, it.Pipeline))
		now := e.cfg.Now()
		e.decide(t, retry.Policy{}, nil, err, retry.Outcome{Class: retry.ClassFinal}, now, now)
		return
	}
	st := &t.pipeline.Stages[t.stage]
	var br *retry.Breaker
	if t.flow != nil {
		br = t.flow.breaker
	}
	if br != nil {
		if err := br.Allow(); err != nil {
			// The dependency is down: give the item back unattempted.
			t.release = true
			return
		}
		t.probe = br.State() == retry.BreakerHalfOpen && t.flow.freeProbe(e.cfg.Now())
	}
	if t.flow != nil && !e.pace(t) {
		// The stage's gate is closed or the client stops: the item goes
		// back without an attempt, its allowance untouched.
		if br != nil {
			br.Record(context.Canceled)
		}
		t.release = true
		return
	}
	if st.Policy.Budget != nil && it.Attempt == 0 && it.RateLimitWaits == 0 {
		st.Policy.Budget.OnRequest()
	}
	// The engine is the outer retry layer: a retry.Do inside the handler
	// makes one attempt per durable attempt instead of multiplying them.
	base := w.base(t)
	ctx, cancel := context.WithCancel(base)
	if st.Timeout > 0 {
		ctx, cancel = context.WithTimeout(base, st.Timeout)
	}
	start := e.cfg.Now()
	e.mu.Lock()
	t.cancel = cancel
	t.startedAt = start
	lost := t.lost
	e.mu.Unlock()
	if !lost && it.LeaseLosses > 0 {
		// The item lost a lease before without a recorded start: its
		// handler may be what kills its process, so its start is recorded
		// before it runs, and another loss is charged (startmark.go).
		lost = !e.markNow(t, start)
	}
	if lost {
		// Taken over while it waited for a worker.
		cancel()
		t.permit.Done()
		if br != nil {
			br.Record(context.Canceled)
		}
		t.release = true
		return
	}
	e.starts.Add(1)
	var span trace.Span // nil when tracing is off (trace.go)
	if e.tracer != nil {
		ctx, span = startAttemptSpan(ctx, e.tracer, it, e.cfg.Owner, start)
	}
	out, err := call(ctx, st.Handle, it)
	end := e.cfg.Now()
	cancel()
	e.mu.Lock()
	t.cancel, lost = nil, t.lost
	e.mu.Unlock()
	if lost {
		// Another worker took the item over: this result cannot be
		// recorded (the token is stale), so nothing is written.
		if span != nil {
			endReleasedSpan(span, "lease lost: another worker took the item over")
		}
		t.permit.Done()
		if br != nil {
			br.Record(context.Canceled)
		}
		t.release = true
		return
	}
	if err != nil && e.workCtx.Err() != nil {
		// The client is stopping and interrupted the handler: the
		// attempt did not fail on its own, so it is not counted.
		if span != nil {
			endReleasedSpan(span, "interrupted: the client is stopping")
		}
		t.permit.Done()
		if br != nil {
			br.Record(context.Canceled)
		}
		t.release = true
		return
	}
	var o retry.Outcome
	if err != nil {
		o = classify(st.Policy, err)
	}
	if br != nil {
		paused := br.State() != retry.BreakerClosed // one atomic load when closed
		answered := err == nil || o.Class == retry.ClassRateLimited
		if answered {
			// The dependency answered: its rate is the flow's business.
			br.Record(nil)
		} else {
			br.Record(err)
		}
		if answered && paused {
			// The dependency is back. A call under way when the breaker
			// opened got through: close it, rather than ignore the success
			// and wait for the next probe. Once closed (by that or by a
			// probe), claim at once rather than at the next poll.
			if br.State() == retry.BreakerOpen {
				br.Reset()
			}
			if br.State() == retry.BreakerClosed {
				e.wake()
			}
		}
	}
	e.settle(t, err, o, end)
	e.decide(t, st.Policy, out, err, o, start, end)
	if span != nil {
		endAttemptSpan(span, &t.comp.Record, end)
	}
}

// call runs h, turning a panic into a final error: a panic is a bug that
// another attempt will not fix.
func call(ctx context.Context, h Handler, it *Item) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = retry.Final(fmt.Errorf("handler panicked: %v", r))
		}
	}()
	return h(ctx, it)
}

// classify is the stage policy's classification, the very one retry.Do
// applies, so that a stage's classifier means the same in both layers.
func classify(p retry.Policy, err error) retry.Outcome {
	return p.Classify(err)
}
