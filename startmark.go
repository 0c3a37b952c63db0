package redrive

import (
	"context"
	"time"
)

// A lease whose process dies is charged a lost attempt only if its attempt
// was recorded as started (Item.AttemptStartedAt); otherwise the rescuer
// returns the item to pending without an attempt. Writing every start
// would double the writes of short attempts, which finish before the start
// would be worth recording: a start is recorded once the handler has run
// for startMarkDelay, in batches. A process that dies within that delay of
// starting a handler costs its item a repeated attempt, not a charged one,
// and counts a lease loss on it (Item.LeaseLosses); from then on the item's
// start is recorded before its handler runs (markNow), so that a handler
// that kills its process (a poison pill) is charged every later attempt
// and dies within its attempts.

// startMarkDelay is how long a handler runs before its start is recorded,
// unless a quarter of the lease is shorter: a start must be recorded well
// before the lease could expire.
const startMarkDelay = 500 * time.Millisecond

func (e *engine) markDelay() time.Duration { return min(startMarkDelay, e.cfg.LeaseDuration/4) }

// markLoop records the starts of the handlers that have run for
// markDelay.
func (e *engine) markLoop() {
	defer e.bg.Done()
	delay := e.markDelay()
	tick := time.NewTicker(delay / 2)
	defer tick.Stop()
	for {
		select {
		case <-e.bgCtx.Done():
			return
		case <-tick.C:
		}
		now := e.cfg.Now()
		var marks []StartMark
		var ts []*task
		e.mu.Lock()
		for _, t := range e.current {
			if t.marked || t.startedAt.IsZero() || t.completing || t.lost || now.Sub(t.startedAt) < delay {
				continue
			}
			marks = append(marks, StartMark{Lease: t.lease.Ref(), At: t.startedAt})
			ts = append(ts, t)
		}
		e.mu.Unlock()
		if len(marks) == 0 {
			continue
		}
		lost, err := e.store.MarkStarted(e.bgCtx, marks)
		if err != nil {
			if e.bgCtx.Err() == nil {
				e.log.Warn("redrive: recording attempt starts failed", "err", err)
			}
			continue
		}
		e.settleMarks(ts, lost)
	}
}

// markNow records t's start before its handler runs, and reports whether
// the lease is still held.
func (e *engine) markNow(t *task, at time.Time) bool {
	ctx, cancel := context.WithTimeout(e.claimCtx, e.cfg.LeaseDuration/2)
	defer cancel()
	lost, err := e.store.MarkStarted(ctx, []StartMark{{Lease: t.lease.Ref(), At: at}})
	if err != nil {
		// Without a recorded start the attempt would not be charged if it
		// killed this process: give the item back rather than run it.
		e.log.Warn("redrive: recording an attempt's start failed", "item", t.lease.Item.ID, "err", err)
		return false
	}
	e.settleMarks([]*task{t}, lost)
	return len(lost) == 0
}

// settleMarks notes which tasks' starts were recorded; a task whose lease
// was lost meanwhile is interrupted, as a heartbeat would.
func (e *engine) settleMarks(ts []*task, lost []int64) {
	gone := make(map[int64]bool, len(lost))
	for _, id := range lost {
		gone[id] = true
	}
	n := 0
	e.mu.Lock()
	for _, t := range ts {
		if !gone[t.lease.Item.ID] {
			t.marked = true
			continue
		}
		if t.completing || t.lost {
			continue
		}
		n++
		t.lost = true
		if t.cancel != nil {
			t.cancel()
		}
	}
	e.mu.Unlock()
	e.reportLost(n, "start mark")
}
