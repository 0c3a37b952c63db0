package postgres

import (
	"context"
	"sync"
	"sync/atomic"
)

// vacuumer runs the store's own VACUUMs: one every Options.VacuumAfter
// items deleted by retention, one at a time in a process.
type vacuumer struct {
	deleted atomic.Int64 // items deleted since the last VACUUM began
	running sync.Mutex
}

// deleted notes n items deleted by retention and, once Options.VacuumAfter
// of them were deleted since the last one, vacuums the items, attempts and
// audit-mark tables before it returns; it reports whether it did.
//
// A queue table on which every item is inserted, updated two or more times
// and deleted leaves dead row versions in the table and dead entries in
// its indexes until vacuum removes them. With autovacuum off, or behind,
// the table only grows and claims walk the dead entries of every item
// claimed before (items_ready keeps them at its head, where claims start):
// 1,000,000-item rounds went 0.50 times as fast by the fifth
// (docs/BENCHMARKS.md). A VACUUM takes no lock that blocks reads or
// writes; SKIP_LOCKED skips a table another VACUUM (autovacuum's, or
// another process's) is working on instead of waiting for it. It runs at
// the end of a retention batch, on retention's goroutine, so that the
// engine's own statements never wait for it; a failure is returned for
// retention to log, and the count starts again.
func (s *Store) vacuumDeleted(ctx context.Context, n int) (bool, error) {
	if s.opts.VacuumAfter < 0 || n <= 0 {
		return false, nil
	}
	v := &s.vacuum
	if v.deleted.Add(int64(n)) < int64(s.opts.VacuumAfter) || !v.running.TryLock() {
		return false, nil
	}
	defer v.running.Unlock()
	v.deleted.Store(0)
	if _, err := s.pool.Exec(ctx, `VACUUM (SKIP_LOCKED) `+s.q+`.items, `+s.q+`.attempts, `+s.q+`.action_items`); err != nil {
		return false, s.fail("vacuum", err)
	}
	return true, nil
}
