package redrive

import (
	"context"

	"github.com/redrive/redrive/retry"
)

// completeLoop writes completions in batches: whatever accumulated while
// the previous batch was being written goes in the next one.
func (e *engine) completeLoop() {
	defer e.completer.Done()
	batch := make([]*task, 0, e.cfg.ClaimBatch)
	for t := range e.completions {
		batch = append(batch[:0], t)
	drain:
		for len(batch) < cap(batch) {
			select {
			case t, ok := <-e.completions:
				if !ok {
					break drain
				}
				batch = append(batch, t)
			default:
				break drain
			}
		}
		e.flush(batch)
	}
}

func (e *engine) flush(batch []*task) {
	// From here on a lease may end because it was completed: a heartbeat
	// that finds it gone does not report a loss (see heartbeatLoop).
	e.mu.Lock()
	for _, t := range batch {
		t.completing = true
	}
	e.mu.Unlock()
	var comps []Completion
	var rel, unstarted []LeaseRef
	for _, t := range batch {
		switch {
		case t.unstarted:
			unstarted = append(unstarted, t.lease.Ref())
		case t.release:
			rel = append(rel, t.lease.Ref())
		default:
			comps = append(comps, t.comp)
		}
	}
	ctx := e.flushCtx
	var applied []bool
	if len(comps) > 0 {
		err := retry.Do(ctx, storeRetry, func(ctx context.Context) error {
			var err error
			applied, err = e.store.Complete(ctx, comps)
			return err
		})
		if err != nil {
			// The leases will expire and the rescuer will repeat the
			// attempts: a crash costs a repeated attempt, never an item.
			e.log.Error("redrive: recording completions failed", "err", err, "items", len(comps))
			applied = make([]bool, len(comps))
		}
	}
	if len(rel) > 0 {
		err := retry.Do(ctx, storeRetry, func(ctx context.Context) error {
			return e.store.Release(ctx, rel, e.cfg.Now())
		})
		if err != nil {
			e.log.Error("redrive: releasing leases failed", "err", err, "items", len(rel))
		}
	}
	if len(unstarted) > 0 {
		err := retry.Do(ctx, storeRetry, func(ctx context.Context) error {
			return e.store.ReleaseUnstarted(ctx, unstarted, e.cfg.Now())
		})
		if err != nil {
			e.log.Error("redrive: releasing leases failed", "err", err, "items", len(unstarted))
		}
	}
	advanced := false
	i := 0
	e.mu.Lock()
	for _, t := range batch {
		e.untrackLocked(t)
	}
	e.mu.Unlock()
	for _, t := range batch {
		if t.release {
			for _, ev := range t.events {
				e.c.emit(ev) // a rescue that returned an unstarted item
			}
			continue
		}
		ok := applied[i]
		i++
		if !ok {
			e.log.Warn("redrive: completion not applied: the lease was lost", "item", t.lease.Item.ID, "stage", t.lease.Item.Stage)
			continue
		}
		if t.comp.State == StatePending && !t.comp.NextAt.After(t.comp.Now) {
			advanced = true
		}
		for _, ev := range t.events {
			e.c.emit(ev)
		}
	}
	if advanced || len(rel)+len(unstarted) > 0 {
		e.wake()
	}
	e.wake()
}
