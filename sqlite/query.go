package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/keptcounts"
)

// stateTime is the time an item reached its state: the reason's time for
// dead and canceled items, else the last update.
const stateTime = `(CASE WHEN state IN ('dead', 'canceled') THEN COALESCE(reason_at, updated_at) ELSE updated_at END)`

// dlqCondition is the condition of the partial indexes of dead and
// canceled items (items_dlq, items_cause).
const dlqCondition = "state IN ('dead', 'canceled')"

// itemWhere translates f into a WHERE clause (without the keyword; "1"
// when f selects everything) and its arguments. Values are always bound as
// parameters. Since is inclusive, Until exclusive.
func itemWhere(f redrive.ItemFilter) (string, []any) {
	var (
		where []string
		args  []any
	)
	if f.RunID != 0 {
		where = append(where, "run_id = ?")
		args = append(args, f.RunID)
	}
	if f.Pipeline != "" {
		where = append(where, "pipeline = ?")
		args = append(args, f.Pipeline)
	}
	if f.Stage != "" {
		where = append(where, "stage = ?")
		args = append(args, f.Stage)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN ("+placeholders(len(f.States))+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	if len(f.States) > 0 && !slices.ContainsFunc(f.States, func(st redrive.State) bool {
		return st != redrive.StateDead && st != redrive.StateCanceled
	}) {
		// The condition of the dead-letter indexes, word for word: SQLite
		// uses a partial index only for a query that states its condition.
		where = append(where, dlqCondition)
	}
	if f.Key != "" {
		where = append(where, "key = ?")
		args = append(args, f.Key)
	}
	if !f.DueAfter.IsZero() {
		where = append(where, "next_at > ?")
		args = append(args, f.DueAfter.UnixNano())
	}
	if f.Class != "" {
		where = append(where, "reason_class = ?")
		args = append(args, f.Class)
	}
	if f.ErrorContains != "" {
		where = append(where, "instr(lower(reason_error), lower(?)) > 0")
		args = append(args, f.ErrorContains)
	}
	if f.Fingerprint != "" {
		where = append(where, "reason_fingerprint = ?")
		args = append(args, f.Fingerprint)
	}
	if !f.Since.IsZero() {
		where = append(where, stateTime+" >= ?")
		args = append(args, f.Since.UnixNano())
	}
	if !f.Until.IsZero() {
		where = append(where, stateTime+" < ?")
		args = append(args, f.Until.UnixNano())
	}
	if f.AfterID > 0 {
		where = append(where, "id > ?")
		args = append(args, f.AfterID)
	}
	if len(f.IDs) > 0 {
		where = append(where, "id IN ("+placeholders(len(f.IDs))+")")
		for _, id := range f.IDs {
			args = append(args, id)
		}
	}
	if f.ActionID != 0 {
		// Through action_items_action (migration 0020): one index range.
		where = append(where, "id IN (SELECT item_id FROM action_items WHERE action_id = ?)")
		args = append(args, f.ActionID)
	}
	if len(where) == 0 {
		return "1", nil
	}
	return strings.Join(where, " AND "), args
}

// withStates returns f limited to allowed states: f.States when each is
// allowed, def when f.States is empty, an error otherwise.
func withStates(f redrive.ItemFilter, def []redrive.State, allowed ...redrive.State) (redrive.ItemFilter, error) {
	if len(f.States) == 0 {
		f.States = def
		return f, nil
	}
	for _, st := range f.States {
		ok := false
		for _, a := range allowed {
			ok = ok || st == a
		}
		if !ok {
			return f, fmt.Errorf("state %q not allowed here", st)
		}
	}
	return f, nil
}

func limitClause(n int) string {
	if n > 0 {
		return fmt.Sprintf(" LIMIT %d", n)
	}
	return ""
}

// GetItem returns one item, or an error wrapping redrive.ErrNotFound.
func (s *Store) GetItem(ctx context.Context, id int64) (redrive.Item, error) {
	it, _, err := scanItem(s.r.QueryRowContext(ctx, `SELECT `+itemCols+` FROM items WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return it, fmt.Errorf("sqlite: get item %d: %w", id, redrive.ErrNotFound)
	}
	if err != nil {
		return it, fmt.Errorf("sqlite: get item %d: %w", id, err)
	}
	return it, nil
}

// ListItems lists the items selected by f in ID order. f.Limit 0 means 100.
func (s *Store) ListItems(ctx context.Context, f redrive.ItemFilter) ([]redrive.Item, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("sqlite: list items: %w", err)
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	scan, err := s.scansIDs(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list items: %w", err)
	}
	query, args := listItemsSQL(f, scan)
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list items: %w", err)
	}
	defer rows.Close()
	var items []redrive.Item
	sc := newItemScanner()
	for rows.Next() {
		it, _, err := sc.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list items: %w", err)
		}
		items = append(items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list items: %w", err)
	}
	return items, nil
}

// listItemsSQL is the query of ListItems(f), f.Limit set; with scan, it
// reads items in ID order through no index (see scansIDs).
func listItemsSQL(f redrive.ItemFilter, scan bool) (string, []any) {
	if walksRun(f) {
		return runWalk(f)
	}
	where, args := itemWhere(f)
	from := ` FROM items`
	if scan {
		from += ` NOT INDEXED`
	}
	return `SELECT ` + itemCols + from + ` WHERE ` + where + ` ORDER BY id` + limitClause(f.Limit), args
}

// scansIDs reports whether a page of f, dead or canceled items filtered
// by pipeline, stage, class or fingerprint (and by no run: walksRun),
// costs less read in ID order, skipping the items it does not select,
// than through items_cause or items_dlq and sorted. SQLite chose the
// index whatever the share of the table the filter holds: it read all
// 318,000 dead items of a pipeline's stage and sorted them for a page of
// 50, 100 ms at a million dead items, where the walk in ID order meets
// its 50 within the first 160 items. For a rare filter the index is
// right. The counts the store keeps (failure_counts) say how many items m
// the filter holds, the IDs' range how many items n the table holds at
// most; a page of l then costs about l·n/m items in ID order and m through
// the index.
func (s *Store) scansIDs(ctx context.Context, f redrive.ItemFilter) (bool, error) {
	if walksRun(f) || len(f.States) == 0 || !keptcounts.Groups(f) ||
		f.Pipeline == "" && f.Stage == "" && f.Class == "" && f.Fingerprint == "" {
		return false, nil
	}
	all := f
	all.AfterID, all.Limit = 0, 0
	m, err := s.keptCount(ctx, all)
	if err != nil || m == 0 {
		return false, err
	}
	var n int64
	// Each of max and min is one step of the rowid's B-tree.
	if err := s.r.QueryRowContext(ctx, `SELECT COALESCE((SELECT max(id) FROM items) - (SELECT min(id) FROM items) + 1, 0)`).Scan(&n); err != nil {
		return false, err
	}
	return int64(m)*int64(m) > int64(f.Limit)*n, nil
}

// walksRun reports whether ListItems reads f by walking the run's items in
// items_run_state (run_id, state, and the rowid, which is id): a filter by
// run that names no key, IDs or fingerprint, whose own indexes find fewer
// rows.
func walksRun(f redrive.ItemFilter) bool {
	return f.RunID != 0 && f.Key == "" && len(f.IDs) == 0 && f.Fingerprint == ""
}

// allStates are the states a filter without states selects.
var allStates = []redrive.State{redrive.StatePending, redrive.StateRunning, redrive.StateSucceeded, redrive.StateDead, redrive.StateCanceled}

// runWalk is the query of ListItems for a filter by run: one arm per state,
// each walking items_run_state from (run, state, cursor) in ID order, merged
// (SQLite's MERGE of a UNION ALL in ORDER BY id) and cut at f.Limit; then
// the page's rows by ID. A page costs its own rows, and the arms read the
// index alone when no other condition names a column. Without the state in
// the search, SQLite took every item of the run through the index and
// sorted them for each page: 30 ms a page at 10,000 items, the whole run
// again for every page.
func runWalk(f redrive.ItemFilter) (string, []any) {
	states := allStates
	if len(f.States) > 0 {
		states = slices.Compact(slices.Sorted(slices.Values(f.States)))
	}
	rest := f
	rest.RunID, rest.States, rest.AfterID = 0, nil, 0
	where, restArgs := itemWhere(rest)
	arms := make([]string, len(states))
	var args []any
	for i, st := range states {
		arms[i] = `SELECT id FROM items INDEXED BY items_run_state WHERE run_id = ? AND state = ? AND id > ? AND ` + where
		args = append(append(args, f.RunID, string(st), f.AfterID), restArgs...)
	}
	return `SELECT ` + itemCols + ` FROM items WHERE id IN (` + strings.Join(arms, " UNION ALL ") + ` ORDER BY id` + limitClause(f.Limit) + `) ORDER BY id`, args
}

// Attempts returns the attempts of an item in the order they were recorded.
func (s *Store) Attempts(ctx context.Context, itemID int64) ([]redrive.Attempt, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, item_id, run_id, pipeline, stage, stage_index, number,
		outcome, class, error, started_at, finished_at, delay_ns, config_hash FROM attempts WHERE item_id = ? ORDER BY id`, itemID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: attempts: %w", err)
	}
	defer rows.Close()
	var out []redrive.Attempt
	for rows.Next() {
		var (
			a                 redrive.Attempt
			outcome           string
			started, finished sql.NullInt64
			delay             int64
		)
		if err := rows.Scan(&a.ID, &a.ItemID, &a.RunID, &a.Pipeline, &a.Stage, &a.StageIndex, &a.Number,
			&outcome, &a.Class, &a.Error, &started, &finished, &delay, &a.ConfigHash); err != nil {
			return nil, fmt.Errorf("sqlite: attempts: %w", err)
		}
		a.Outcome = redrive.Outcome(outcome)
		a.StartedAt = nt(started)
		a.FinishedAt = nt(finished)
		a.Delay = time.Duration(delay)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: attempts: %w", err)
	}
	return out, nil
}

// CancelPending cancels the pending items selected by f (f.States must be
// empty or pending) with reason r and returns how many it canceled. An empty
// r.Stage means each item's current stage; r.Attempts 0 means each item's
// attempt counter. The items' UpdatedAt becomes r.At.
func (s *Store) CancelPending(ctx context.Context, f redrive.ItemFilter, r redrive.Reason) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("sqlite: cancel pending: %w", err)
	}
	f, err := withStates(f, []redrive.State{redrive.StatePending}, redrive.StatePending)
	if err != nil {
		return 0, fmt.Errorf("sqlite: cancel pending: %w", err)
	}
	where, args := itemWhere(f)
	q := `UPDATE items SET state = 'canceled', updated_at = ?,
		reason_stage = COALESCE(?, stage), reason_class = ?, reason_error = ?,
		reason_attempts = COALESCE(?, attempt), reason_at = ?, reason_fingerprint = ?
		WHERE id IN (SELECT id FROM items WHERE ` + where + ` ORDER BY id` + limitClause(f.Limit) + `)`
	var attempts any
	if r.Attempts != 0 {
		attempts = r.Attempts
	}
	args = append([]any{tnz(r.At), nullStr(r.Stage), r.Class, r.Error, attempts, tnz(r.At), redrive.Fingerprint(r.Error)}, args...)
	var n int64
	err = s.writeTx(ctx, "cancel pending", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// StateCounts counts items by pipeline, stage and state, ordered by
// pipeline, stage index, stage and state; runID 0 means all runs.
func (s *Store) StateCounts(ctx context.Context, runID int64) ([]redrive.StateCount, error) {
	q := `SELECT pipeline, stage, state, COUNT(*) FROM items`
	var args []any
	if runID != 0 {
		q += ` WHERE run_id = ?`
		args = append(args, runID)
	}
	q += ` GROUP BY pipeline, stage_index, stage, state ORDER BY pipeline, stage_index, stage, state`
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: state counts: %w", err)
	}
	defer rows.Close()
	var out []redrive.StateCount
	for rows.Next() {
		var c redrive.StateCount
		var st string
		if err := rows.Scan(&c.Pipeline, &c.Stage, &st, &c.Count); err != nil {
			return nil, fmt.Errorf("sqlite: state counts: %w", err)
		}
		c.State = redrive.State(st)
		// The same stage name may appear at two indexes after a pipeline
		// changed; merge them.
		if n := len(out); n > 0 && out[n-1].Pipeline == c.Pipeline && out[n-1].Stage == c.Stage && out[n-1].State == c.State {
			out[n-1].Count += c.Count
			continue
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: state counts: %w", err)
	}
	return out, nil
}

// RetryHistogram counts the finished (succeeded, dead or canceled) items of
// a run, or of all runs when runID is 0, by their number of retries, in
// ascending order of retries. An item's retries are its recorded attempts
// that were not rate-limited waits, minus the number of distinct stages
// (stage indexes) those attempts were made at, floored at 0: the first
// attempt at each stage is not a retry; lost attempts and attempts made
// after a redrive are. Items without attempts have 0 retries.
func (s *Store) RetryHistogram(ctx context.Context, runID int64) ([]redrive.HistogramBucket, error) {
	q := `SELECT retries, COUNT(*) FROM (
		SELECT MAX(0, COUNT(a.id) - COUNT(DISTINCT a.stage_index)) AS retries
		FROM items i LEFT JOIN attempts a ON a.item_id = i.id AND a.outcome <> 'rate_limited'
		WHERE i.state IN ('succeeded', 'dead', 'canceled')`
	var args []any
	if runID != 0 {
		q += ` AND i.run_id = ?`
		args = append(args, runID)
	}
	q += ` GROUP BY i.id) GROUP BY retries ORDER BY retries`
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: retry histogram: %w", err)
	}
	defer rows.Close()
	var out []redrive.HistogramBucket
	for rows.Next() {
		var b redrive.HistogramBucket
		if err := rows.Scan(&b.Retries, &b.Items); err != nil {
			return nil, fmt.Errorf("sqlite: retry histogram: %w", err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: retry histogram: %w", err)
	}
	return out, nil
}

// TopErrors groups the failed attempts (every outcome but succeeded) by
// pipeline, stage, class and error and returns the f.Limit (default 5) most
// frequent per stage, ordered by pipeline, stage (in pipeline order), count
// descending, then class and error.
func (s *Store) TopErrors(ctx context.Context, f redrive.ErrorFilter) ([]redrive.ErrorCount, error) {
	if f.Limit < 0 {
		return nil, errors.New("sqlite: top errors: negative limit")
	}
	limit := f.Limit
	if limit == 0 {
		limit = 5
	}
	where := []string{"outcome <> 'succeeded'"}
	var args []any
	if f.RunID != 0 {
		where = append(where, "item_id IN (SELECT id FROM items WHERE run_id = ?)")
		args = append(args, f.RunID)
	}
	if f.Pipeline != "" {
		where = append(where, "pipeline = ?")
		args = append(args, f.Pipeline)
	}
	q := `SELECT pipeline, stage, class, error, n FROM (
		SELECT pipeline, stage, class, error, n, si,
			ROW_NUMBER() OVER (PARTITION BY pipeline, stage ORDER BY n DESC, class, error) AS rn,
			MIN(si) OVER (PARTITION BY pipeline, stage) AS stage_order
		FROM (SELECT pipeline, stage, class, error, COUNT(*) AS n, MIN(stage_index) AS si
			FROM attempts WHERE ` + strings.Join(where, " AND ") + `
			GROUP BY pipeline, stage, class, error))
		WHERE rn <= ? ORDER BY pipeline, stage_order, stage, n DESC, class, error`
	args = append(args, limit)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: top errors: %w", err)
	}
	defer rows.Close()
	var out []redrive.ErrorCount
	for rows.Next() {
		var e redrive.ErrorCount
		if err := rows.Scan(&e.Pipeline, &e.Stage, &e.Class, &e.Error, &e.Count); err != nil {
			return nil, fmt.Errorf("sqlite: top errors: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: top errors: %w", err)
	}
	return out, nil
}

// Redrive sends the dead or canceled items selected by f (f.States empty
// means dead) back to pending at the stage they stopped at, with attempt
// and rate-limit counters at 0 and the reason cleared; their attempts are
// kept. The i-th item in ID order is due at now + i*interval. The runs of
// the redriven items are reopened (status running, no finish time or
// reason), in the same transaction.
func (s *Store) Redrive(ctx context.Context, f redrive.ItemFilter, now time.Time, interval time.Duration) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("sqlite: redrive: %w", err)
	}
	if interval < 0 {
		return 0, errors.New("sqlite: redrive: negative interval")
	}
	f, err := withStates(f, []redrive.State{redrive.StateDead}, redrive.StateDead, redrive.StateCanceled)
	if err != nil {
		return 0, fmt.Errorf("sqlite: redrive: %w", err)
	}
	where, args := itemWhere(f)
	n := 0
	err = s.writeTx(ctx, "redrive", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id, run_id FROM items WHERE `+where+` ORDER BY id`+limitClause(f.Limit), args...)
		if err != nil {
			return err
		}
		var ids []int64
		runs := map[int64]bool{}
		for rows.Next() {
			var id, run int64
			if err := rows.Scan(&id, &run); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
			runs[run] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		upd, err := tx.PrepareContext(ctx, `UPDATE items SET state = 'pending', attempt = 0, rate_limit_waits = 0, failed_attempts = 0,
			next_at = ?, ready = ?, updated_at = ?, lease_owner = NULL, lease_expires_at = NULL,
			reason_stage = NULL, reason_class = NULL, reason_error = NULL, reason_attempts = NULL, reason_at = NULL,
			reason_fingerprint = NULL
			WHERE id = ?`)
		if err != nil {
			return err
		}
		defer upd.Close()
		base := tnz(now)
		for i, id := range ids {
			next := base + int64(i)*int64(interval)
			if _, err := upd.ExecContext(ctx, next, next <= base, base, id); err != nil {
				return err
			}
		}
		reopen, err := tx.PrepareContext(ctx,
			`UPDATE runs SET status = 'running', finished_at = NULL, reason = '' WHERE id = ?`)
		if err != nil {
			return err
		}
		defer reopen.Close()
		for run := range runs {
			if _, err := reopen.ExecContext(ctx, run); err != nil {
				return err
			}
		}
		n = len(ids)
		return nil
	})
	return n, err
}

// Purge deletes the dead items selected by f, and canceled ones when
// f.States names that state, with their attempts, and counts them as purged
// in their runs. It returns how many items it deleted.
func (s *Store) Purge(ctx context.Context, f redrive.ItemFilter) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("sqlite: purge: %w", err)
	}
	f, err := withStates(f, []redrive.State{redrive.StateDead}, redrive.StateDead, redrive.StateCanceled)
	if err != nil {
		return 0, fmt.Errorf("sqlite: purge: %w", err)
	}
	where, args := itemWhere(f)
	n := 0
	sel := `SELECT id FROM items WHERE ` + where + ` ORDER BY id` + limitClause(f.Limit)
	err = s.writeTx(ctx, "purge", func(tx *sql.Tx) error {
		// The runs keep counting what is purged (redrive.Counts.Purged).
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET purged = purged + p.n
			FROM (SELECT run_id, COUNT(*) AS n FROM items WHERE id IN (`+sel+`) GROUP BY run_id) AS p
			WHERE runs.id = p.run_id`, args...); err != nil {
			return err
		}
		var err error
		n, err = deleteItems(ctx, tx, sel, args)
		return err
	})
	return n, err
}

// deleteItems deletes the items whose IDs sel selects, and their attempts.
func deleteItems(ctx context.Context, tx *sql.Tx, sel string, args []any, after ...func(context.Context, *sql.Tx) error) (int, error) {
	if _, err := tx.ExecContext(ctx, `CREATE TEMP TABLE IF NOT EXISTS doomed (id INTEGER PRIMARY KEY)`); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM temp.doomed`); err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO temp.doomed (id) `+sel, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	for _, f := range after {
		if err := f(ctx, tx); err != nil {
			return 0, err
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM attempts WHERE item_id IN (SELECT id FROM temp.doomed)`); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM items WHERE id IN (SELECT id FROM temp.doomed)`); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM temp.doomed`); err != nil {
		return 0, err
	}
	return int(n), nil
}

// keepCounted adds the succeeded items about to be deleted (temp.doomed) to
// their runs' retained counts, so that retention leaves a run's counts as
// they were (migration 0016).
func keepCounted(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `UPDATE runs SET retained = retained + d.n
		FROM (SELECT run_id, COUNT(*) AS n FROM items WHERE id IN (SELECT id FROM temp.doomed) GROUP BY run_id) AS d
		WHERE runs.id = d.run_id`)
	return err
}

// Count counts the items selected by f.
func (s *Store) Count(ctx context.Context, f redrive.ItemFilter) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("sqlite: count: %w", err)
	}
	if keptcounts.Count(f) {
		n, err := s.keptCount(ctx, f)
		if err != nil {
			return 0, fmt.Errorf("sqlite: count: %w", err)
		}
		return n, nil
	}
	where, args := itemWhere(f)
	q := `SELECT COUNT(*) FROM items WHERE ` + where
	if f.Limit > 0 {
		q = `SELECT COUNT(*) FROM (SELECT id FROM items WHERE ` + where + ` ORDER BY id` + limitClause(f.Limit) + `)`
	}
	var n int
	if err := s.r.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count: %w", err)
	}
	return n, nil
}

// DeleteSucceeded deletes up to limit succeeded items (all of them when
// limit is 0) last updated before t, oldest ID first, with their attempts,
// and returns how many it deleted.
func (s *Store) DeleteSucceeded(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit < 0 {
		return 0, errors.New("sqlite: delete succeeded: negative limit")
	}
	n := 0
	err := s.writeTx(ctx, "delete succeeded", func(tx *sql.Tx) error {
		var err error
		n, err = deleteItems(ctx, tx, `SELECT id FROM items INDEXED BY items_succeeded_updated
			WHERE state = 'succeeded' AND updated_at < ? ORDER BY updated_at`+limitClause(limit),
			[]any{tnz(before)}, keepCounted)
		return err
	})
	if err == nil {
		s.deleted(ctx, n)
	}
	return n, err
}

// DeleteFinishedRuns deletes up to limit finished items of the runs that
// finished before t, with their attempts, then the runs left without
// items, in one transaction.
func (s *Store) DeleteFinishedRuns(ctx context.Context, before time.Time, limit int) (items, runs int, err error) {
	if limit < 0 {
		return 0, 0, errors.New("sqlite: delete finished runs: negative limit")
	}
	err = s.writeTx(ctx, "delete finished runs", func(tx *sql.Tx) error {
		var err error
		items, err = deleteItems(ctx, tx, `SELECT i.id FROM items i WHERE i.run_id IN (
				SELECT r.id FROM runs r WHERE r.status <> 'running' AND r.finished_at < ?)
			AND i.state IN ('succeeded', 'dead', 'canceled')`+limitClause(limit), []any{tnz(before)})
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM runs WHERE status <> 'running' AND finished_at < ?
			AND NOT EXISTS (SELECT 1 FROM items i WHERE i.run_id = runs.id)`, tnz(before))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		runs = int(n)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	s.deleted(ctx, items)
	return items, runs, nil
}

// checkpointAfter is how many deleted items pass between two checkpoints
// that truncate the write-ahead log.
const checkpointAfter = 100_000

// deleted notes that n items were deleted and, every checkpointAfter of
// them, checkpoints the write-ahead log and truncates it: a retention pass
// writes as much to the log as the work it cleans up after, and a log
// left long is read by every reader until the next checkpoint. The freed
// pages go on SQLite's free list, and new items reuse them, so the file
// stops growing once retention keeps pace; only VACUUM gives the space
// back to the file system. A failed checkpoint (a long reader) is retried
// at the next one.
func (s *Store) deleted(ctx context.Context, n int) {
	if n == 0 || s.sinceCheckpoint.Add(int64(n)) < checkpointAfter {
		return
	}
	s.sinceCheckpoint.Store(0)
	_, _ = s.w.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
}
