package redrive

import (
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
	// DefaultRetentionBatch is how many items one delete removes.
	DefaultRetentionBatch = 1000
)

// retentionBatchesPerPass bounds one pass (10,000,000 items at the
// default batch), so that a stop is never kept waiting by a pass.
const retentionBatchesPerPass = 10_000

// retentionLoop deletes what the retention settings let go, every
// RetentionInterval, so that a store that has worked millions of items
// stays as small and as fast as its live items make it. The first pass
// comes one interval after the start, out of the way of a starting
// client's first claims and heartbeats.
func (e *engine) retentionLoop() {
	defer e.bg.Done()
	for sleep(e.bgCtx, e.cfg.RetentionInterval) {
		e.retain()
	}
}

// retain runs one retention pass: succeeded items older than Retention,
// then runs finished longer than RunRetention ago with all their items.
// Each batch of RetentionBatch items is its own statement and transaction,
// so that PostgreSQL's autovacuum can reclaim the rows of one batch while
// the next is deleted and no transaction holds many locks; a pass goes on
// until a batch comes back short, so that retention keeps pace with any
// throughput.
func (e *engine) retain() {
	ctx := e.bgCtx
	now := e.cfg.Now()
	batch := e.cfg.RetentionBatch
	items, runs := 0, 0
	if e.cfg.Retention > 0 {
		for range retentionBatchesPerPass {
			n, err := e.store.DeleteSucceeded(ctx, now.Add(-e.cfg.Retention), batch)
			if err != nil {
				if ctx.Err() == nil {
					e.log.Warn("redrive: retention of succeeded items failed", "err", err)
				}
				return
			}
			items += n
			if n < batch {
				break
			}
		}
	}
	if e.cfg.RunRetention > 0 {
		for range retentionBatchesPerPass {
			n, r, err := e.store.DeleteFinishedRuns(ctx, now.Add(-e.cfg.RunRetention), batch)
			if err != nil {
				if ctx.Err() == nil {
					e.log.Warn("redrive: retention of finished runs failed", "err", err)
				}
				return
			}
			items, runs = items+n, runs+r
			if n < batch {
				break
			}
		}
	}
	notes := e.retainOutbox(now)
	if items > 0 || runs > 0 || notes > 0 {
		e.log.Info("redrive: deleted items, runs and notifications past retention", "items", items, "runs", runs,
			"notifications", notes)
	}
}

// retainOutbox deletes notifications delivered longer than OutboxRetention
// ago, in batches like items: a busy webhook writes a row per event, and
// delivered rows only serve an operator's look back.
func (e *engine) retainOutbox(now time.Time) int {
	o, ok := e.store.(Outbox)
	if !ok || e.cfg.OutboxRetention <= 0 {
		return 0
	}
	total := 0
	for range retentionBatchesPerPass {
		n, err := o.DeleteDelivered(e.bgCtx, now.Add(-e.cfg.OutboxRetention), e.cfg.RetentionBatch)
		if err != nil {
			if e.bgCtx.Err() == nil {
				e.log.Warn("redrive: retention of delivered notifications failed", "err", err)
			}
			break
		}
		total += n
		if n < e.cfg.RetentionBatch {
			break
		}
	}
	return total
}
