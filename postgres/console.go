package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// DeadErrors counts the dead (or f.States) items selected by f by
// pipeline, stage, class and exact error.
func (s *Store) DeadErrors(ctx context.Context, f redrive.ItemFilter) ([]redrive.ErrorCount, error) {
	f.AfterID, f.Limit = 0, 0
	if len(f.States) == 0 {
		f.States = []redrive.State{redrive.StateDead}
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("postgres: dead errors: %w", err)
	}
	var a args
	where := itemWhere(f, &a)
	rows, err := s.pool.Query(ctx, `SELECT pipeline, stage, COALESCE(reason_class, ''), COALESCE(reason_error, ''), count(*) AS n
		FROM `+s.q+`.items WHERE `+where+` GROUP BY 1, 2, 3, 4 ORDER BY n DESC, 1, 2, 3, 4`, a...)
	if err != nil {
		return nil, s.fail("dead errors", err)
	}
	out, err := scanErrorCounts(rows)
	if err != nil {
		return nil, s.fail("dead errors", err)
	}
	return out, nil
}

// AttemptErrors counts the failed attempts of f's run, pipeline and stage
// by pipeline, stage, class and exact error.
func (s *Store) AttemptErrors(ctx context.Context, f redrive.ItemFilter) ([]redrive.ErrorCount, error) {
	var a args
	where := "outcome <> 'succeeded'"
	if f.RunID != 0 {
		// attempts has no index on run_id: the run's items lead to them.
		run := a.add(f.RunID)
		where += " AND run_id = " + run + " AND item_id IN (SELECT id FROM " + s.q + ".items WHERE run_id = " + run + ")"
	}
	if f.Pipeline != "" {
		where += " AND pipeline = " + a.add(f.Pipeline)
	}
	if f.Stage != "" {
		where += " AND stage = " + a.add(f.Stage)
	}
	if f.Class != "" {
		where += " AND class = " + a.add(f.Class)
	}
	if f.ErrorContains != "" {
		where += " AND strpos(lower(error), lower(" + a.add(f.ErrorContains) + ")) > 0"
	}
	rows, err := s.pool.Query(ctx, `SELECT pipeline, stage, class, error, count(*) AS n
		FROM `+s.q+`.attempts WHERE `+where+` GROUP BY 1, 2, 3, 4 ORDER BY n DESC, 1, 2, 3, 4`, a...)
	if err != nil {
		return nil, s.fail("attempt errors", err)
	}
	out, err := scanErrorCounts(rows)
	if err != nil {
		return nil, s.fail("attempt errors", err)
	}
	return out, nil
}

// scanErrorCounts reads rows of pipeline, stage, class, error and count.
func scanErrorCounts(rows pgx.Rows) ([]redrive.ErrorCount, error) {
	defer rows.Close()
	var out []redrive.ErrorCount
	for rows.Next() {
		var e redrive.ErrorCount
		var n int64
		if err := rows.Scan(&e.Pipeline, &e.Stage, &e.Class, &e.Error, &n); err != nil {
			return nil, err
		}
		e.Count = int(n)
		out = append(out, e)
	}
	return out, rows.Err()
}
