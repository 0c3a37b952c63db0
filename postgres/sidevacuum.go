package postgres

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// sideVacuumer keeps the store's side tables small whether or not
// autovacuum runs: the tables of kept counts and the outbox.
//
// failure_counts and run_counts take rows of deltas that a fold later
// replaces with their sums: the fold deletes every row it sums, so each
// fold leaves as many dead rows as it read. Without VACUUM their space is
// never reused, and failure_counts, which every read of error groups scans
// whole, only grows: a million dead items left 2,000,000 dead rows and 256
// MB behind one fold, and every dead-letter page by pipeline and stage then
// spent 35 ms scanning them for its 700 live rows (docs/BENCHMARKS.md).
//
// Each claim adds a row to lease_batches, each completion and release
// updates the rows of its leases' claims, and the rescuer deletes them
// once their leases end (leasebatches.go): as many dead rows, and the
// claims' item IDs in its TOAST table. They are vacuumed with the counts.
//
// Every notification of the outbox is written three times or more
// (queued, claimed, settled) and deleted by retention, so it leaves as
// many dead rows, and dead entries at the head of outbox_due where the
// next claim starts.
type sideVacuumer struct {
	checkedAt     atomic.Int64  // when a read last measured failure_counts, Unix nanoseconds; 0: never
	recheck       time.Duration // how long before a read measures it again; 0: countsRecheck
	outboxDeleted atomic.Int64  // notifications deleted since the outbox's last VACUUM began
	failures      atomic.Int64  // failure_counts rows this store's writes added since its last fold began

	// Under the vacuumer's lock (vacuum.go).
	running bool          // a VACUUM of side tables runs in the background
	counts  bool          // one of the counts was asked for since it began
	outbox  bool          // one of the outbox was asked for since it began
	fold    bool          // a fold of failure_counts was asked for since it began
	done    chan struct{} // closed when the running one ends
}

// outboxVacuumEvery is how many delivered notifications retention deletes
// between two VACUUMs of the outbox.
const outboxVacuumEvery = 10_000

// countsVacuumEvery is how many Complete calls pass between two VACUUMs
// of the counts tables: run_counts takes a row per run and state from
// every claim and completion, folded every foldEvery completions.
const countsVacuumEvery = 64 * foldEvery

// countsBloatPages is the size, in pages, from which failure_counts is
// checked for space its live rows do not need (see compactCounts).
const countsBloatPages = 128

// countsRecheck is how long after a read of error groups measured
// failure_counts the next read measures it again (see checkCounts).
const countsRecheck = time.Minute

// vacuumCounts starts a VACUUM of the counts tables in the background
// (see compactCounts and vacuumSide).
func (s *Store) vacuumCounts() { s.vacuumSide(true, false, false) }

// foldWrittenAt is how many rows the store's own writes add to
// failure_counts between two of its folds (see failuresAdded): a read sums
// that many in 20 – 40 ms, and a fold with its VACUUMs every 8,192 deaths
// or so costs a surge of deaths little.
const foldWrittenAt = 16384

// failuresAdded notes n rows that the store's own writes (dead and
// canceled items, failed attempts) added to failure_counts through its
// triggers and, every foldWrittenAt of them, folds the table and vacuums
// the counts tables in the background.
//
// Without it the rows waited for a read of error groups to fold them: a
// surge of a million deaths with no console open left 2,000,000 rows, and
// the first read after it summed them all (0.9 s), folded them in the
// request (3.4 s), and the read after that scanned their 256 MB of dead
// rows (0.5 – 0.7 s) while the VACUUM ran (docs/BENCHMARKS.md, "The
// console after a surge of deaths"). Folded as they come, the table holds
// a row per group and fewer than foldWrittenAt others.
func (s *Store) failuresAdded(n int) {
	if n <= 0 || s.side.failures.Add(int64(n)) < foldWrittenAt {
		return
	}
	s.side.failures.Store(0)
	s.vacuumSide(true, false, true)
}

// outboxDeletedN notes n notifications deleted by retention and, every
// outboxVacuumEvery of them, starts a VACUUM of the outbox in the
// background (see vacuumSide).
func (s *Store) outboxDeletedN(n int) {
	if n <= 0 || s.side.outboxDeleted.Add(int64(n)) < outboxVacuumEvery {
		return
	}
	s.side.outboxDeleted.Store(0)
	s.vacuumSide(false, true, false)
}

// vacuumSide starts VACUUMs of the counts tables, of the outbox or both
// in the background, unless the store runs none (Options.VacuumAfter
// negative), each table's after a fold of failure_counts when fold is
// set (the fold runs without the VACUUMs too). One asked for while
// another runs follows it, since the running one may have begun before
// the rows that the caller left. They run under the store's context, as
// the VACUUMs of retention do (vacuum.go), one at a time, and Close waits
// for them.
func (s *Store) vacuumSide(counts, outbox, fold bool) {
	if s.opts.VacuumAfter < 0 {
		counts, outbox = false, false
	}
	if !counts && !outbox && !fold {
		return
	}
	v, c := &s.vacuum, &s.side
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ctx.Err() != nil {
		return
	}
	c.counts, c.outbox, c.fold = c.counts || counts, c.outbox || outbox, c.fold || fold
	if c.running {
		return
	}
	c.running = true
	done := make(chan struct{})
	c.done = done
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		defer close(done)
		for {
			v.mu.Lock()
			counts, outbox, fold := c.counts, c.outbox, c.fold
			if !counts && !outbox && !fold || v.ctx.Err() != nil {
				c.running = false
				v.mu.Unlock()
				return
			}
			c.counts, c.outbox, c.fold = false, false, false
			v.mu.Unlock()
			// Each table's VACUUM runs whether or not the other's failed;
			// a failure is kept for retention to log (vacuumDeleted).
			var errs []error
			if fold {
				_, err := s.foldFailures(v.ctx)
				errs = append(errs, err)
			}
			if counts {
				errs = append(errs, s.compactCounts(v.ctx))
			}
			if outbox {
				_, err := s.pool.Exec(v.ctx, `VACUUM (SKIP_LOCKED) `+s.q+`.outbox`)
				errs = append(errs, err)
			}
			if err := errors.Join(errs...); err != nil && !errors.Is(v.ctx.Err(), context.Canceled) {
				v.mu.Lock()
				v.err = s.fail("vacuum", err)
				v.mu.Unlock()
			}
		}
	}()
}

// compactCounts vacuums failure_counts, run_counts and lease_batches. A fold inserts its
// sums after the rows it deletes, at the table's end, where they keep the
// VACUUM from truncating the pages it emptied; when failure_counts still
// holds more than countsBloatPages pages and four times what its rows
// need, a second fold moves the sums into the space the VACUUM freed at
// the table's head and a second VACUUM cuts the empty tail.
func (s *Store) compactCounts(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `VACUUM (SKIP_LOCKED) `+s.q+`.failure_counts, `+s.q+`.run_counts, `+s.q+`.lease_batches`); err != nil {
		return err
	}
	var pages int32
	var rows float32
	// VACUUM has just set relpages and reltuples.
	if err := s.pool.QueryRow(ctx, `SELECT relpages, reltuples FROM pg_class WHERE oid = $1::regclass`,
		s.q+".failure_counts").Scan(&pages, &rows); err != nil {
		return err
	}
	// A row of failure_counts takes about 100 bytes: 80 per page.
	if pages <= countsBloatPages || float32(pages) <= 4*(max(rows, 0)/80+1) {
		return nil
	}
	if _, err := s.foldFailures(ctx); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `VACUUM (SKIP_LOCKED) `+s.q+`.failure_counts`)
	return err
}

// checkCounts starts a VACUUM of the counts tables when failure_counts
// holds more than countsBloatPages pages: a table that grew under a
// version without these VACUUMs, or while the store ran none, shrinks on
// a read of error groups. A read measures the table at most once every
// countsRecheck, and again after that, because a VACUUM cuts the table's
// empty tail only if it gets the table's exclusive lock, which it tries
// for a few seconds and which reads that follow each other without a
// pause deny it; a process that
// only reads (a console after a burst of failures, which leaves no deltas
// for a fold to fold and so starts no VACUUM) would otherwise keep the
// large table, and every read would scan it. A table that its live rows
// fill gets one VACUUM a minute while it is read, which finds nothing to
// do.
func (s *Store) checkCounts(ctx context.Context) {
	if s.opts.VacuumAfter < 0 {
		return
	}
	c := &s.side
	now := time.Now().UnixNano()
	last := c.checkedAt.Load()
	every := c.recheck
	if every == 0 {
		every = countsRecheck
	}
	if last != 0 && now-last < int64(every) || !c.checkedAt.CompareAndSwap(last, now) {
		return
	}
	var size int64
	if err := s.pool.QueryRow(ctx, `SELECT pg_relation_size($1::regclass)`, s.q+".failure_counts").Scan(&size); err != nil {
		c.checkedAt.CompareAndSwap(now, last)
		return
	}
	// The size alone: reltuples can be as old as the last VACUUM, which
	// may have found a million live deltas that a fold has deleted since.
	// compactCounts measures the rows once its VACUUM has counted them.
	if size > countsBloatPages*8192 {
		s.vacuumCounts()
	}
}

// waitSideVacuum waits for the VACUUMs of side tables running in the
// background, if any, to end, or for ctx.
func (s *Store) waitSideVacuum(ctx context.Context) error {
	s.vacuum.mu.Lock()
	done := s.side.done
	s.vacuum.mu.Unlock()
	return waitClosed(ctx, done)
}
