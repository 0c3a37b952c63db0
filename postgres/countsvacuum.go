package postgres

import (
	"context"
	"errors"
	"sync/atomic"
)

// countsVacuumer keeps the tables of kept counts, failure_counts and
// run_counts, small whether or not autovacuum runs. Both take rows of
// deltas that a fold later replaces with their sums: the fold deletes
// every row it sums, so each fold leaves as many dead rows as it read.
// Without VACUUM their space is never reused, and failure_counts, which
// every read of error groups scans whole, only grows: a million dead
// items left 2,000,000 dead rows and 256 MB behind one fold, and every
// dead-letter page by pipeline and stage then spent 35 ms scanning them
// for its 700 live rows (docs/BENCHMARKS.md).
type countsVacuumer struct {
	checked atomic.Bool // this process measured failure_counts once

	// Under the vacuumer's lock (vacuum.go).
	running bool          // a VACUUM of the counts runs in the background
	again   bool          // one was asked for since it began
	done    chan struct{} // closed when the running one ends
}

// countsVacuumEvery is how many Complete calls pass between two VACUUMs
// of the counts tables: run_counts takes a row per run and state from
// every claim and completion, folded every foldEvery completions.
const countsVacuumEvery = 64 * foldEvery

// countsBloatPages is the size, in pages, from which failure_counts is
// checked for space its live rows do not need (see compactCounts).
const countsBloatPages = 128

// vacuumCounts starts a VACUUM of the counts tables in the background
// (see compactCounts) unless the store runs none (Options.VacuumAfter
// negative). One asked for while another runs follows it, since the
// running one may have begun before the rows that the caller's fold left.
// It runs under the store's context, as the VACUUMs of retention do
// (vacuum.go), and Close waits for it.
func (s *Store) vacuumCounts() {
	if s.opts.VacuumAfter < 0 {
		return
	}
	v, c := &s.vacuum, &s.counts
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ctx.Err() != nil {
		return
	}
	c.again = true
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
			if !c.again || v.ctx.Err() != nil {
				c.running = false
				v.mu.Unlock()
				return
			}
			c.again = false
			v.mu.Unlock()
			if err := s.compactCounts(v.ctx); err != nil && !errors.Is(v.ctx.Err(), context.Canceled) {
				v.mu.Lock()
				v.err = s.fail("vacuum counts", err)
				v.mu.Unlock()
			}
		}
	}()
}

// compactCounts vacuums failure_counts and run_counts. A fold inserts its
// sums after the rows it deletes, at the table's end, where they keep the
// VACUUM from truncating the pages it emptied; when failure_counts still
// holds more than countsBloatPages pages and four times what its rows
// need, a second fold moves the sums into the space the VACUUM freed at
// the table's head and a second VACUUM cuts the empty tail.
func (s *Store) compactCounts(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `VACUUM (SKIP_LOCKED) `+s.q+`.failure_counts, `+s.q+`.run_counts`); err != nil {
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

// checkCounts starts a VACUUM of the counts tables once per process when
// failure_counts holds more than countsBloatPages pages: a table that
// grew under a version without these VACUUMs, or while the store ran
// none, shrinks on its first read of error groups.
func (s *Store) checkCounts(ctx context.Context) {
	if s.opts.VacuumAfter < 0 || !s.counts.checked.CompareAndSwap(false, true) {
		return
	}
	var size int64
	if err := s.pool.QueryRow(ctx, `SELECT pg_relation_size($1::regclass)`, s.q+".failure_counts").Scan(&size); err != nil {
		s.counts.checked.Store(false)
		return
	}
	if size > countsBloatPages*8192 {
		s.vacuumCounts()
	}
}

// waitCountsVacuum waits for the VACUUM of the counts tables running in
// the background, if any, to end, or for ctx.
func (s *Store) waitCountsVacuum(ctx context.Context) error {
	s.vacuum.mu.Lock()
	done := s.counts.done
	s.vacuum.mu.Unlock()
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
