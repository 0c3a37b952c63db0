package postgres

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// vacuumer runs the store's own VACUUMs: one every Options.VacuumAfter
// items deleted by retention, one at a time in a process, each in the
// background of the store.
type vacuumer struct {
	deleted atomic.Int64 // items deleted since the last VACUUM began

	// ctx is the context of every VACUUM: the store's, canceled by Close,
	// not the caller's.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	running chan struct{} // closed when the running VACUUM ends; nil: none runs
	err     error         // the last VACUUM's failure, not yet returned
}

// vacuumDeleted notes n items deleted by retention and, once
// Options.VacuumAfter of them were deleted since the last one began,
// starts a VACUUM of the items, attempts and audit-mark tables in the
// background; it reports whether it started one, and returns the failure
// of an earlier VACUUM that no call returned yet, for retention to log.
//
// A queue table on which every item is inserted, updated two or more times
// and deleted leaves dead row versions in the table and dead entries in
// its indexes until vacuum removes them. With autovacuum off, or behind,
// the table only grows and claims walk the dead entries of every item
// claimed before (items_ready keeps them at its head, where claims start):
// 1,000,000-item rounds went 0.50 times as fast by the fifth
// (docs/BENCHMARKS.md). A VACUUM takes no lock that blocks reads or
// writes; SKIP_LOCKED skips a table another VACUUM (autovacuum's, or
// another process's) is working on instead of waiting for it. It may
// truncate the heap's empty tail (a short ACCESS EXCLUSIVE lock, taken
// only if free and given back once another transaction waits for it: a
// claim that meets it waits some 10 – 25 ms, docs/BENCHMARKS.md, "What
// VACUUM's truncation costs a claim's latency"). TRUNCATE false gained
// no rate over ten rounds of 1,000,000 items, kept the heap at its peak,
// and would leave a drained queue's table with pages and no tuples in
// its statistics every time (docs/engine.md, "PostgreSQL over the long
// haul").
//
// The VACUUM runs on a goroutine of its own, under the store's context,
// not the caller's: on retention's goroutine, retention stopped deleting
// for as long as it ran (tens of seconds on a table of a few GB), and a
// client that stopped canceled it, which loses the work of all but its
// first phase: in rounds of the benchmark, each of which stops its client,
// every VACUUM was canceled before it ended and the tables grew by a
// round's dead rows every round (docs/engine.md, "PostgreSQL over the
// long haul"). Close cancels a VACUUM still running. A VACUUM that failed
// or was canceled leaves the count where it was, so that the next batch
// of retention starts another.
func (s *Store) vacuumDeleted(_ context.Context, n int) (bool, error) {
	if s.opts.VacuumAfter < 0 || n <= 0 {
		return false, nil
	}
	v := &s.vacuum
	v.mu.Lock()
	defer v.mu.Unlock()
	err := v.err
	v.err = nil
	if v.deleted.Add(int64(n)) < int64(s.opts.VacuumAfter) || v.running != nil || v.ctx.Err() != nil {
		return false, err
	}
	v.deleted.Store(0)
	done := make(chan struct{})
	v.running = done
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		_, verr := s.pool.Exec(v.ctx, `VACUUM (SKIP_LOCKED) `+s.q+`.items, `+s.q+`.attempts, `+s.q+`.action_items`)
		v.mu.Lock()
		defer v.mu.Unlock()
		if verr != nil {
			v.deleted.Add(int64(s.opts.VacuumAfter))
			if !errors.Is(v.ctx.Err(), context.Canceled) {
				v.err = s.fail("vacuum", verr)
			}
		}
		v.running = nil
		close(done)
	}()
	return true, err
}

// waitVacuum waits for the VACUUM running in the background, if any, to
// end, or for ctx.
func (s *Store) waitVacuum(ctx context.Context) error {
	s.vacuum.mu.Lock()
	done := s.vacuum.running
	s.vacuum.mu.Unlock()
	return waitClosed(ctx, done)
}

// waitClosed waits for done to be closed, or for ctx; a nil done is
// nothing to wait for.
func waitClosed(ctx context.Context, done <-chan struct{}) error {
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
