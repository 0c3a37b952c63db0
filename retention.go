package redrive

import (
	"context"
	"time"
)

// Defaults of the retention settings of Config.
const (
	// DefaultRetention is how long succeeded items are kept.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultRunRetention is how long finished runs are kept.
	DefaultRunRetention = 30 * 24 * time.Hour
	// DefaultOutboxRetention is how long delivered notifications are kept.
	DefaultOutboxRetention = 7 * 24 * time.Hour
	// DefaultRetentionInterval is how often retention runs.
	DefaultRetentionInterval = time.Minute
	// DefaultRetentionBatch is how many items the first delete of a
	// retention pass removes; the pass grows its batch while batches come
	// back full (see retentionMaxBatch).
	DefaultRetentionBatch = 1000
)

// A retention pass whose batches come back full, each within half of
// retentionBatchTime, doubles its batch, up to retentionMaxBatch items (or
// Config.RetentionBatch when that is larger), so that it gets through a
// backlog in fewer turns of the store's writer:
// on SQLite each batch waits for the one writer beside the engine's claims
// and completions, and batches of 1,000 deleted fewer items per second
// than a busy engine finished. A batch that takes longer than
// retentionBatchTime halves the batch again (not below the starting size),
// so that the engine's writes never wait long behind a delete; a batch
// that comes back short ends the pass, and the next pass starts again at
// Config.RetentionBatch.
const (
	retentionMaxBatch  = 20_000
	retentionBatchTime = 500 * time.Millisecond
)

// batchSizer is the adaptive batch size of one retention pass.
type batchSizer struct {
	start, max, size int
}

func newBatchSizer(start int) *batchSizer {
	return &batchSizer{start: start, max: max(start, retentionMaxBatch), size: start}
}

// done takes the result of a batch of b.size items that deleted n in took
// and sets the size of the next batch; it reports whether the pass goes on
// (the batch came back full).
func (b *batchSizer) done(n int, took time.Duration) bool {
	switch {
	case n < b.size:
		b.size = b.start
		return false
	case took > retentionBatchTime:
		b.size = max(b.start, b.size/2)
	case took <= retentionBatchTime/2:
		b.size = min(b.max, b.size*2)
	}
	return true
}

// retentionBatchesPerPass bounds one pass (at least 10,000,000 items at
// the default starting batch), so that a pass always ends.
const retentionBatchesPerPass = 10_000

// A pass deletes each kind for at most retentionPassIntervals retention
// intervals (and at least retentionPassMin), so that a pass that cannot
// catch up ends and says so (RetentionPassed.Backlog, a warning in the
// log) instead of deleting for as long as the engine keeps finishing
// items. A pass that ends behind is followed by the next at once.
const (
	retentionPassIntervals = 10
	retentionPassMin       = time.Second
)

// retentionBacklogCap bounds the count of succeeded items past retention
// that a pass left behind (RetentionPassed.Backlog), so that counting a
// backlog costs no more than a bounded scan.
const retentionBacklogCap = 1_000_000

// retentionLoop deletes what the retention settings let go, every
// RetentionInterval, so that a store that has worked millions of items
// stays as small and as fast as its live items make it. The first pass
// comes one interval after the start, out of the way of a starting
// client's first claims and heartbeats; a pass that ended behind is
// followed by the next without waiting.
func (e *engine) retentionLoop() {
	defer e.bg.Done()
	behind := false
	for {
		if !behind && !sleep(e.bgCtx, e.cfg.RetentionInterval) {
			return
		}
		if e.bgCtx.Err() != nil {
			return
		}
		behind = e.retain()
	}
}

// retain runs one retention pass: succeeded items older than Retention,
// then runs finished longer than RunRetention ago with all their items,
// then notifications delivered longer than OutboxRetention ago; a kind
// whose delete fails is logged and the pass goes on with the next.
// Each batch is its own statement and transaction, so that PostgreSQL's
// autovacuum can reclaim the rows of one batch while the next is deleted
// and no transaction holds many locks; a pass goes on until a batch comes
// back short, growing its batch from RetentionBatch while batches come back
// full (batchSizer), so that retention keeps pace with a busy engine, or
// until its time is up (retentionPassIntervals). It reports whether it
// ended behind: succeeded items past retention were left to delete.
func (e *engine) retain() (behind bool) {
	t0 := time.Now()
	now := e.cfg.Now()
	items, runs, notes := 0, 0, 0
	pass := RetentionPassed{}
	if e.cfg.Retention > 0 {
		cutoff := now.Add(-e.cfg.Retention)
		n, full := e.retainBatches("succeeded items", t0, func(ctx context.Context, limit int) (int, error) {
			return e.store.DeleteSucceeded(ctx, cutoff, limit)
		})
		items += n
		pass.Succeeded = n
		if full {
			behind = true
			pass.Backlog = e.retentionBacklog(cutoff)
		}
	}
	if e.cfg.RunRetention > 0 {
		n, _ := e.retainBatches("finished runs", time.Now(), func(ctx context.Context, limit int) (int, error) {
			n, r, err := e.store.DeleteFinishedRuns(ctx, now.Add(-e.cfg.RunRetention), limit)
			runs += r
			return n, err
		})
		items += n
		pass.RunItems = n
	}
	// Delivered notifications only serve an operator's look back, and a
	// busy webhook writes a row per event.
	if o, ok := e.store.(Outbox); ok && e.cfg.OutboxRetention > 0 {
		cutoff := now.Add(-e.cfg.OutboxRetention)
		var full bool
		notes, full = e.retainBatches("delivered notifications", time.Now(), func(ctx context.Context, limit int) (int, error) {
			return o.DeleteDelivered(ctx, cutoff, limit)
		})
		if full {
			behind = true
			pass.NotificationBacklog = e.notificationBacklog(cutoff)
		}
	}
	pass.Runs, pass.Notifications, pass.Took = runs, notes, time.Since(t0)
	if items > 0 || runs > 0 || notes > 0 {
		e.log.Info("redrive: deleted items, runs and notifications past retention", "items", items, "runs", runs,
			"notifications", notes)
	}
	e.retainBacklog = e.reportBacklog("succeeded items", e.retainBacklog, pass.Backlog, pass.Succeeded, pass.Took)
	e.retainNoteBacklog = e.reportBacklog("delivered notifications", e.retainNoteBacklog, pass.NotificationBacklog, pass.Notifications, pass.Took)
	e.c.emit(pass)
	return behind
}

// reportBacklog logs a warning when the backlog of what a pass left (now)
// grew from the last pass's (prev), and that retention caught up when it
// fell to 0; it returns now, the next pass's prev.
func (e *engine) reportBacklog(what string, prev, now, deleted int, took time.Duration) int {
	switch {
	case now > prev:
		e.log.Warn("redrive: retention is behind: "+what+" past retention accumulate faster than they are deleted",
			"backlog", now, "previous_backlog", prev, "deleted", deleted, "took", took.Round(time.Millisecond))
	case now == 0 && prev > 0:
		e.log.Info("redrive: retention caught up with "+what+" past retention", "deleted", deleted)
	}
	return now
}

// retentionBacklog counts the succeeded items last updated before cutoff
// that are still held, at most retentionBacklogCap.
func (e *engine) retentionBacklog(cutoff time.Time) int {
	return e.countBacklog("retention's backlog", func() (int, error) {
		return e.store.Count(e.bgCtx, ItemFilter{States: []State{StateSucceeded}, Until: cutoff, Limit: retentionBacklogCap})
	})
}

// notificationBacklog counts the notifications delivered before cutoff
// that are still held, at most retentionBacklogCap, when the store can
// (DeliveredCounter), else 0.
func (e *engine) notificationBacklog(cutoff time.Time) int {
	dc, ok := e.store.(DeliveredCounter)
	if !ok {
		return 0
	}
	return e.countBacklog("the outbox retention's backlog", func() (int, error) {
		return dc.CountDelivered(e.bgCtx, cutoff, retentionBacklogCap)
	})
}

// countBacklog returns count's result; a failed count is logged (as a
// failed counting of what) and counts as retentionBacklogCap.
func (e *engine) countBacklog(what string, count func() (int, error)) int {
	n, err := count()
	if err != nil {
		if e.bgCtx.Err() == nil {
			e.log.Warn("redrive: counting "+what+" failed", "err", err)
		}
		return retentionBacklogCap
	}
	return n
}

// retainBatches calls del with a batch size from RetentionBatch up, as
// batchSizer sets it, until a batch comes back short, a call fails (logged
// as a failed retention of what), retentionBatchesPerPass calls were made
// or the pass that started at start is out of time, and returns how many
// rows del deleted and whether its last batch came back full: whether it
// stopped with rows left to delete.
func (e *engine) retainBatches(what string, start time.Time, del func(ctx context.Context, limit int) (int, error)) (total int, full bool) {
	b := newBatchSizer(e.cfg.RetentionBatch)
	passTime := max(retentionPassMin, retentionPassIntervals*e.cfg.RetentionInterval)
	for range retentionBatchesPerPass {
		t0 := time.Now()
		n, err := del(e.bgCtx, b.size)
		total += n
		if err != nil {
			if e.bgCtx.Err() == nil {
				e.log.Warn("redrive: retention of "+what+" failed", "err", err)
			}
			return total, false
		}
		if !b.done(n, time.Since(t0)) {
			return total, false
		}
		if time.Since(start) >= passTime {
			return total, true
		}
	}
	return total, true
}
