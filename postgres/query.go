package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/keptcounts"
)

// GetItem returns one item, or an error wrapping redrive.ErrNotFound.
func (s *Store) GetItem(ctx context.Context, id int64) (redrive.Item, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+s.itemCols()+` FROM `+s.q+`.items WHERE id = $1`, id)
	if err != nil {
		return redrive.Item{}, s.fail("get item", err)
	}
	// Rows, not a Row: itemScanner reads names as the driver's bytes,
	// which a Row has released by the time it scans.
	it, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (redrive.Item, error) {
		it, _, err := newItemScanner().scan(row)
		return it, err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return it, fmt.Errorf("postgres: get item %d: %w", id, redrive.ErrNotFound)
	}
	if err != nil {
		return it, s.fail("get item", err)
	}
	return it, nil
}

// ListItems lists the items selected by f in ID order. f.Limit 0 means 100.
func (s *Store) ListItems(ctx context.Context, f redrive.ItemFilter) ([]redrive.Item, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("postgres: list items: %w", err)
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	sql, a, settings, err := s.listItemsSQL(ctx, f)
	if err != nil {
		return nil, s.fail("list items", err)
	}
	var out []redrive.Item
	sc := newItemScanner()
	scan := func(rows pgx.Rows) error {
		for rows.Next() {
			it, _, err := sc.scan(rows)
			if err != nil {
				return err
			}
			out = append(out, it)
		}
		return rows.Err()
	}
	if settings != "" {
		err = s.queryPlanned(ctx, settings, sql, a, scan)
	} else {
		var rows pgx.Rows
		if rows, err = s.pool.Query(ctx, sql, a...); err == nil {
			err = scan(rows)
			rows.Close()
		}
	}
	if err != nil {
		return nil, s.fail("list items", err)
	}
	return out, nil
}

// listItemsSQL is the query of ListItems(f), f.Limit set, and the planner
// settings it runs with ("": none).
func (s *Store) listItemsSQL(ctx context.Context, f redrive.ItemFilter) (sql string, a args, settings string, err error) {
	if walksRun(f) {
		return s.runWalkSQL(f, &a), a, "", nil
	}
	if walksCauses(f) {
		sql, a, ok, err := s.causeWalkSQL(ctx, f)
		if ok || err != nil {
			return sql, a, causeWalkPlan, err
		}
	}
	return `SELECT ` + s.itemCols() + ` FROM ` + s.q + `.items WHERE ` + s.itemWhere(f, &a) + ` ORDER BY id` + limitClause(&a, f.Limit), a, "", nil
}

// walksRun reports whether ListItems reads f by walking the run's items in
// items_run_state (run_id, state, id): a filter by run that names no key,
// IDs or fingerprint, whose own indexes find fewer rows.
func walksRun(f redrive.ItemFilter) bool {
	return f.RunID != 0 && f.Key == "" && len(f.IDs) == 0 && f.Fingerprint == ""
}

// allStates are the states a filter without states selects.
var allStates = []redrive.State{redrive.StatePending, redrive.StateRunning, redrive.StateSucceeded, redrive.StateDead, redrive.StateCanceled}

// runWalkSQL is the query of ListItems for a filter by run: one arm per
// state, each walking items_run_state (run_id, state, id) from the cursor
// and stopping after f.Limit rows, and the arms' rows, at most f.Limit per
// state, sorted by ID. A page costs its own rows, wherever the run's items
// lie in the table.
//
// Left to the planner, ORDER BY id LIMIT with run_id = $1 walked items_pkey
// from the cursor and filtered by run: on a run's last page, short of its
// LIMIT, that walk went on through every later item of the table (50,000
// rows of other runs: 40 ms a page). Without statistics it took the run's
// every item instead, by a bitmap scan, and sorted them: every page cost the
// whole run. The planner guesses run_id and id independent, so each arm
// names its state as a range of one value rather than an equality and asks
// for the order (state, id): items_run_state gives it, items_pkey cannot,
// and the range still bounds the walk at both ends (run_id is equal, so
// the walk starts at the cursor's (state, id) and stops past the state).
func (s *Store) runWalkSQL(f redrive.ItemFilter, a *args) string {
	states := allStates
	if len(f.States) > 0 {
		states = slices.Compact(slices.Sorted(slices.Values(f.States)))
	}
	rest := f
	rest.RunID, rest.States, rest.AfterID = 0, nil, 0
	where := s.itemWhere(rest, a)
	run, after, limit := a.add(f.RunID), a.add(f.AfterID), a.add(f.Limit)
	arms := make([]string, len(states))
	for i, st := range states {
		if st == redrive.StateRunning {
			// Running items are stored pending (leasestate.go); they are
			// the items in flight, looked up by ID. Ordered as the other
			// arms, so that the arms are appended and sorted once.
			arms[i] = `(SELECT ` + s.itemCols() + ` FROM ` + s.q + `.items
				WHERE ` + s.stateCond(a, st) + ` AND run_id = ` + run + ` AND id > ` + after + `
				AND ` + where + ` ORDER BY state, id LIMIT ` + limit + `)`
			continue
		}
		stored, lease := storedState(st)
		state := a.add(string(stored))
		arms[i] = `(SELECT ` + s.itemCols() + ` FROM ` + s.q + `.items
			WHERE run_id = ` + run + ` AND state >= ` + state + ` AND state <= ` + state + lease + ` AND id > ` + after + `
			AND ` + where + ` ORDER BY state, id LIMIT ` + limit + `)`
	}
	return `SELECT * FROM (` + strings.Join(arms, " UNION ALL ") + `) walk ORDER BY id LIMIT ` + limit
}

// Attempts returns the attempts of an item in the order they were recorded.
func (s *Store) Attempts(ctx context.Context, itemID int64) ([]redrive.Attempt, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, item_id, run_id, pipeline, stage, stage_index, number,
		outcome, class, error, started_at, finished_at, delay_ns, config_hash FROM `+s.q+`.attempts WHERE item_id = $1 ORDER BY id`, itemID)
	if err != nil {
		return nil, s.fail("attempts", err)
	}
	defer rows.Close()
	var out []redrive.Attempt
	for rows.Next() {
		var (
			a        redrive.Attempt
			outcome  string
			idx, num int32
			delay    int64
		)
		if err := rows.Scan(&a.ID, &a.ItemID, &a.RunID, &a.Pipeline, &a.Stage, &idx, &num,
			&outcome, &a.Class, &a.Error, &a.StartedAt, &a.FinishedAt, &delay, &a.ConfigHash); err != nil {
			return nil, s.fail("attempts", err)
		}
		a.StageIndex, a.Number = int(idx), int(num)
		a.Outcome = redrive.Outcome(outcome)
		a.StartedAt, a.FinishedAt = a.StartedAt.UTC(), a.FinishedAt.UTC()
		a.Delay = time.Duration(delay)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("attempts", err)
	}
	return out, nil
}

// StateCounts counts items by pipeline, stage and state, ordered by
// pipeline, stage index, stage and state; runID 0 means all runs.
func (s *Store) StateCounts(ctx context.Context, runID int64) ([]redrive.StateCount, error) {
	var a args
	where := "true"
	if runID != 0 {
		where = "run_id = " + a.add(runID)
	}
	rows, err := s.pool.Query(ctx, `SELECT pipeline, stage, state, sum(n) FROM (
		SELECT pipeline, stage, `+stateExpr+` AS state, min(stage_index) AS si, count(*) AS n FROM `+s.q+`.items
		WHERE `+where+` GROUP BY 1, 2, 3) c
		GROUP BY pipeline, stage, state ORDER BY pipeline, min(si), stage, state`, a...)
	if err != nil {
		return nil, s.fail("state counts", err)
	}
	defer rows.Close()
	var out []redrive.StateCount
	for rows.Next() {
		var c redrive.StateCount
		var st string
		var n int64
		if err := rows.Scan(&c.Pipeline, &c.Stage, &st, &n); err != nil {
			return nil, s.fail("state counts", err)
		}
		c.State, c.Count = redrive.State(st), int(n)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("state counts", err)
	}
	return out, nil
}

// RetryHistogram counts the finished (succeeded, dead or canceled) items of
// a run, or of all runs when runID is 0, by their number of retries, in
// ascending order of retries. An item's retries are its recorded attempts
// that were not rate-limited waits, minus the number of distinct stage
// indexes those attempts were made at, floored at 0.
func (s *Store) RetryHistogram(ctx context.Context, runID int64) ([]redrive.HistogramBucket, error) {
	var a args
	where := "i.state IN ('succeeded', 'dead', 'canceled')"
	if runID != 0 {
		where += " AND i.run_id = " + a.add(runID)
	}
	rows, err := s.pool.Query(ctx, `SELECT retries, count(*) FROM (
		SELECT greatest(0, count(t.id) - count(DISTINCT t.stage_index)) AS retries
		FROM `+s.q+`.items i LEFT JOIN `+s.q+`.attempts t ON t.item_id = i.id AND t.outcome <> 'rate_limited'
		WHERE `+where+` GROUP BY i.id) h
		GROUP BY retries ORDER BY retries`, a...)
	if err != nil {
		return nil, s.fail("retry histogram", err)
	}
	defer rows.Close()
	var out []redrive.HistogramBucket
	for rows.Next() {
		var r, n int64
		if err := rows.Scan(&r, &n); err != nil {
			return nil, s.fail("retry histogram", err)
		}
		out = append(out, redrive.HistogramBucket{Retries: int(r), Items: int(n)})
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("retry histogram", err)
	}
	return out, nil
}

// TopErrors groups the failed attempts (every outcome but succeeded) by
// pipeline, stage, class and error and returns the f.Limit (default 5) most
// frequent per stage, ordered by pipeline, stage (in pipeline order), count
// descending, then class and error.
func (s *Store) TopErrors(ctx context.Context, f redrive.ErrorFilter) ([]redrive.ErrorCount, error) {
	if f.Limit < 0 {
		return nil, errors.New("postgres: top errors: negative limit")
	}
	limit := f.Limit
	if limit == 0 {
		limit = 5
	}
	var a args
	where := "outcome <> 'succeeded'"
	if f.RunID != 0 {
		// attempts has no index on run_id (one less to maintain per
		// attempt): the run's items lead to their attempts.
		run := a.add(f.RunID)
		where += " AND run_id = " + run + " AND item_id IN (SELECT id FROM " + s.q + ".items WHERE run_id = " + run + ")"
	}
	if f.Pipeline != "" {
		where += " AND pipeline = " + a.add(f.Pipeline)
	}
	rows, err := s.pool.Query(ctx, `SELECT pipeline, stage, class, error, n FROM (
		SELECT pipeline, stage, class, error, n,
			row_number() OVER (PARTITION BY pipeline, stage ORDER BY n DESC, class, error) AS rn,
			min(si) OVER (PARTITION BY pipeline, stage) AS stage_order
		FROM (SELECT pipeline, stage, class, error, count(*) AS n, min(stage_index) AS si
			FROM `+s.q+`.attempts WHERE `+where+`
			GROUP BY pipeline, stage, class, error) g) r
		WHERE rn <= `+a.add(limit)+` ORDER BY pipeline, stage_order, stage, n DESC, class, error`, a...)
	if err != nil {
		return nil, s.fail("top errors", err)
	}
	defer rows.Close()
	var out []redrive.ErrorCount
	for rows.Next() {
		var e redrive.ErrorCount
		var n int64
		if err := rows.Scan(&e.Pipeline, &e.Stage, &e.Class, &e.Error, &n); err != nil {
			return nil, s.fail("top errors", err)
		}
		e.Count = int(n)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("top errors", err)
	}
	return out, nil
}

// Count counts the items selected by f, at most f.Limit when it is set.
func (s *Store) Count(ctx context.Context, f redrive.ItemFilter) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("postgres: count: %w", err)
	}
	if keptcounts.Count(f) {
		n, err := s.keptCount(ctx, f)
		if err != nil {
			return 0, s.fail("count", err)
		}
		return n, nil
	}
	var a args
	where := s.itemWhere(f, &a)
	sql := `SELECT count(*) FROM ` + s.q + `.items WHERE ` + where
	if f.Limit > 0 {
		sql = `SELECT count(*) FROM (SELECT id FROM ` + s.q + `.items WHERE ` + where + ` ORDER BY id` + limitClause(&a, f.Limit) + `) c`
	}
	var n int64
	if err := s.pool.QueryRow(ctx, sql, a...).Scan(&n); err != nil {
		return 0, s.fail("count", err)
	}
	return int(n), nil
}

// DeleteFinishedRuns deletes up to limit finished items of the runs that
// finished before t, with their attempts, each statement its own
// transaction, then the runs left without items and their count rows.
// Both statements plan with finishedRunsSettings.
func (s *Store) DeleteFinishedRuns(ctx context.Context, before time.Time, limit int) (items, runs int, err error) {
	if limit < 0 {
		return 0, 0, errors.New("postgres: delete finished runs: negative limit")
	}
	counted, err := s.countsFailures(ctx)
	if err != nil {
		return 0, 0, s.fail("delete finished runs", err)
	}
	sql, a := s.deleteFinishedItemsSQL(before, limit, counted)
	err = s.queryPlanned(ctx, finishedRunsSettings, sql, a, func(rows pgx.Rows) error {
		n, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
		items = int(n)
		return err
	})
	if err != nil {
		return 0, 0, s.fail("delete finished runs", err)
	}
	err = s.queryPlanned(ctx, finishedRunsSettings, s.deleteFinishedRunsSQL(), []any{before}, func(rows pgx.Rows) error {
		n, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
		runs = int(n)
		return err
	})
	if err != nil {
		return items, 0, s.fail("delete finished runs", err)
	}
	if _, err := s.vacuumDeleted(ctx, items); err != nil {
		return items, runs, err
	}
	return items, runs, nil
}

// finishedRunsSettings are the plan settings of DeleteFinishedRuns's
// statements: no sequential scan, no bitmap scan, no JIT, as for
// retention's batch (retainSettings, without its claim-only outbox
// setting). Without statistics (autovacuum off: never analyzed) or after
// the VACUUM of an emptied items table, the planner otherwise chose to
// scan all of attempts for the attempts of a batch of deleted items, and
// all of items to find the runs left without items
// (TestFinishedRunsPlan).
const finishedRunsSettings = `SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true),
	set_config('jit', 'off', true)`

// deleteFinishedItemsSQL is the statement, and its arguments, that
// deletes up to limit (0: no limit) finished items of the runs finished
// before t, with their attempts and audit marks, and returns how many
// items it deleted. The finished runs drive a lookup of their items in
// items_run_state, LATERAL so that items cannot be the outer side: with
// items estimated at one row (after the VACUUM of an emptied items table,
// see completePlan), the planner walked all of items_run_state and looked
// up each item's run. With counted (see countsFailures) it takes the dead
// and canceled items and the failed attempts it deletes off their failure
// groups itself, one row per group.
func (s *Store) deleteFinishedItemsSQL(before time.Time, limit int, counted bool) (string, args) {
	var a args
	t := a.add(before)
	// The SQL first, then the arguments it added: Go does not order the
	// read of a in a return statement after the calls beside it.
	lim := limitClause(&a, limit)
	sql := s.deleteItemsSQL(`DELETE FROM `+s.q+`.items WHERE state IN ('succeeded', 'dead', 'canceled') AND id = ANY(ARRAY(
		SELECT x.id FROM `+s.q+`.runs r CROSS JOIN LATERAL (SELECT i.id FROM `+s.q+`.items i
			WHERE i.run_id = r.id AND i.state IN ('succeeded', 'dead', 'canceled')`+lim+` FOR UPDATE SKIP LOCKED) x
		WHERE r.status <> 'running' AND r.finished_at < `+t+lim+`))`, counted)
	return sql, a
}

// deleteFinishedRunsSQL is the statement that deletes the runs finished
// before $1 that have no items left, with their count rows, and returns
// how many runs it deleted. OFFSET 0 keeps the NOT EXISTS a lookup of
// items_run_state per finished run: as an anti-join, the planner hashed
// all of items (no statistics) or merged with a walk of all of
// items_run_state (after the VACUUM of an emptied table).
func (s *Store) deleteFinishedRunsSQL() string {
	return `WITH d AS (
		DELETE FROM ` + s.q + `.runs r WHERE r.status <> 'running' AND r.finished_at < $1
			AND NOT EXISTS (SELECT 1 FROM ` + s.q + `.items i WHERE i.run_id = r.id OFFSET 0)
		RETURNING r.id),
	dc AS (DELETE FROM ` + s.q + `.run_counts WHERE run_id IN (SELECT id FROM d))
	SELECT count(*) FROM d`
}

// deleteItemsSQL is a statement that runs del, a DELETE of items, deletes
// the attempts and audit marks of the deleted items with it, and returns
// how many items it deleted (see removedRest).
func (s *Store) deleteItemsSQL(del string, counted bool) string {
	return `WITH d AS (` + del + countedCond(counted) + ` RETURNING ` + removedCols("") + `),` + s.removedRest(counted, false)
}
