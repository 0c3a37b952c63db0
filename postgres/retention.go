package postgres

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeleteSucceeded deletes up to limit succeeded items (all of them when
// limit is 0) last updated before t, least recently updated first, with
// their attempts and audit marks, and returns how many it deleted.
//
// It walks items_succeeded_updated in order and stops after limit rows, so
// that a batch costs what it deletes: the statement before it sorted every
// succeeded item by ID to delete the first of them, a cost that grew with
// the backlog, and retention fell behind a busy engine (docs/BENCHMARKS.md,
// "PostgreSQL for the long haul"). A batch that came back full leaves a
// cursor (retainCursor) where the next one goes on, so that the next batch
// does not walk again the index entries of the rows just deleted, which
// stay in the index until vacuum removes them; a batch that comes back
// short, or an unlimited one, clears it, so the next pass walks from the
// start and finds the rows committed behind the cursor.
func (s *Store) DeleteSucceeded(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit < 0 {
		return 0, errors.New("postgres: delete succeeded: negative limit")
	}
	var lim *int64
	if limit > 0 {
		l := int64(limit)
		lim = &l
	}
	counted, err := s.countsFailures(ctx)
	if err != nil {
		return 0, s.fail("delete succeeded", err)
	}
	from := s.retain.get()
	// Rows another process is deleting are skipped, not waited for.
	// The runs keep counting what retention deletes (migration 0016): the
	// statement's transaction sets redrive.counts_unchanged, which the
	// delete trigger of run_counts skips. Sorts, bitmap scans and
	// sequential scans are off for the batch's implicit transaction
	// (retainSettings): the only plans left walk the indexes.
	b := &pgx.Batch{}
	b.Queue(retainSettings)
	b.Queue(s.deleteSucceededSQL(counted), before, from, lim)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var n int64
	var last *time.Time
	if _, err := br.Exec(); err != nil {
		return 0, s.fail("delete succeeded", err)
	}
	if err := br.QueryRow().Scan(&n, &last); err != nil {
		return 0, s.fail("delete succeeded", err)
	}
	if err := br.Close(); err != nil {
		return 0, s.fail("delete succeeded", err)
	}
	if limit > 0 && int(n) == limit && last != nil {
		s.retain.set(last.Add(-retainSlack))
	} else {
		s.retain.set(time.Time{})
	}
	if _, err := s.vacuumDeleted(ctx, int(n)); err != nil {
		return int(n), err
	}
	return int(n), nil
}

// retainSettings are the plan settings of DeleteSucceeded's transaction:
// claimSettings (no sort, no bitmap scan, no JIT: the batch walks
// items_succeeded_updated in order) and no sequential scan. Without
// statistics (autovacuum off: never analyzed) the planner priced a scan
// of all of attempts, filtered by the batch's 20,000 IDs one by one,
// below 20,000 lookups in attempts_item; the batch then cost what the
// table held, and retention deleted 38,000 of 1,600,000 items in eight
// rounds of the benchmark.
const retainSettings = claimSettings + `, set_config('enable_seqscan', 'off', true)`

// deleteSucceededSQL is DeleteSucceeded's statement; its arguments are
// the cutoff, the cursor and the limit (NULL: none).
//
// The attempts and audit marks of the deleted items are deleted by
// item_id = ANY(an array of the deleted IDs), which can only be an index
// condition, not by item_id IN (the deleted IDs), a semi-join the planner
// prices from the tables' statistics: once a VACUUM had set those of a
// never-analyzed table (autovacuum off), it estimated one deleted item and
// chose a nested loop that walked all of attempts_item once per deleted
// item, a statement that ran for minutes while retention fell behind by
// every item the engine finished (docs/engine.md, "PostgreSQL over the
// long haul"). With retainSettings, the condition is that of an index
// scan of attempts_item.
//
// The items themselves are deleted by the addresses of the rows the walk
// of items_succeeded_updated locked, as a claim updates them (see
// claimSQL): by ID, after the VACUUM of an emptied items table, the DELETE
// walked all of items_succeeded_updated and filtered it by the batch's IDs
// (TestLockingWritesAfterEmptiedVacuum), a batch that cost what retention
// had not yet deleted. The DELETE repeats none of the walk's conditions
// (see promoteSQL).
//
// With counted (see countsFailures), the failed attempts of the items
// (those retried before they succeeded) leave their failure groups one
// row per group, and attempts_failure_delete skips them: one trigger call
// and one failure_counts row per failed attempt before.
func (s *Store) deleteSucceededSQL(counted bool) string {
	attempts, rest := ``, ``
	if counted {
		attempts = ` AND ` + failuresCounted + ` RETURNING pipeline, stage, class, fingerprint, run_id`
		rest = `,
	` + s.attemptFailuresGone("da")
	}
	return `WITH d AS (DELETE FROM ` + s.q + `.items WHERE ` + countsUnchanged + ` AND ctid = ANY(ARRAY(
		SELECT ctid FROM ` + s.q + `.items WHERE state = 'succeeded' AND updated_at < $1 AND updated_at >= $2
		ORDER BY updated_at LIMIT $3 FOR UPDATE SKIP LOCKED)) RETURNING id, updated_at),
	da AS (DELETE FROM ` + s.q + `.attempts WHERE item_id = ANY(ARRAY(SELECT id FROM d))` + attempts + `),
	dm AS (DELETE FROM ` + s.q + `.action_items WHERE item_id = ANY(ARRAY(SELECT id FROM d)))` + rest + `
	SELECT count(*), max(updated_at) FROM d`
}

// retainSlack is how far before the last row it deleted a full batch of
// DeleteSucceeded lets the next one start: completions stamped a little
// before it that committed after it are still found by the next batch.
// Rows stamped earlier still are found by the next pass, which starts from
// the beginning.
const retainSlack = time.Second

// retainCursor is the update time from which DeleteSucceeded's next batch
// walks items_succeeded_updated; zero: from the start.
type retainCursor struct {
	mu   sync.Mutex
	from time.Time
}

func (c *retainCursor) get() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.from
}

func (c *retainCursor) set(t time.Time) {
	c.mu.Lock()
	c.from = t
	c.mu.Unlock()
}
