package redrive

import (
	"context"

	"github.com/redrive/redrive/retry"
)

// completeLoop writes completions in batches: whatever accumulated while
// the previous batch was being written goes in the next one. While
// another completer is writing, a completer holding less than half a
// batch keeps gathering until that write ends: the store is busy anyway,
// and a small batch costs nearly what a full one costs (per item, a
// completion written in a batch of 500 took twice the client CPU of one in
// a batch of 2,000 on PostgreSQL; docs/BENCHMARKS.md). With no write
// under way a completion is written at once, so an idle engine records
// single items without delay.
func (e *engine) completeLoop() {
	defer e.completer.Done()
	batch := make([]*task, 0, e.cfg.ClaimBatch)
	// The completions of a batch are copied into one slice that every
	// batch reuses: a Completion is some 370 bytes, which a new slice per
	// batch allocated for every item.
	var comps []Completion
	for t := range e.completions {
		batch = e.gather(append(batch[:0], t))
		e.writing.Add(1)
		comps = e.flush(batch, comps[:0])
		e.writing.Add(-1)
		select {
		case e.wrote <- struct{}{}:
		default:
		}
	}
}

// gather adds to batch the completions waiting and, while another
// completer writes and batch is less than half full, those that arrive
// until that write ends.
func (e *engine) gather(batch []*task) []*task {
	for len(batch) < cap(batch) {
		select {
		case t, ok := <-e.completions:
			if !ok {
				return batch
			}
			batch = append(batch, t)
			continue
		default:
		}
		if 2*len(batch) >= cap(batch) || e.writing.Load() == 0 {
			return batch
		}
		select {
		case t, ok := <-e.completions:
			if !ok {
				return batch
			}
			batch = append(batch, t)
		case <-e.wrote:
			// A write ended (or an earlier one did): look again.
		}
	}
	return batch
}

// flush writes batch's completions, releases and unstarted releases,
// copying the completions into comps, which it returns for the next
// batch.
func (e *engine) flush(batch []*task, comps []Completion) []Completion {
	// From here on a lease may end because it was completed: a heartbeat
	// that finds it gone does not report a loss (see heartbeatLoop).
	e.mu.Lock()
	for _, t := range batch {
		t.completing = true
	}
	e.mu.Unlock()
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
		for _, ev := range t.events {
			e.c.emit(ev)
		}
	}
	// Workers are free, and items may have become due (a move to the
	// next stage, a release): the claimer looks again, and so do the
	// external workers waiting for items.
	e.wake()
	// Kept for the next batch without the outputs and reasons it points
	// to.
	clear(comps)
	return comps
}
