package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

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
		return nil, fmt.Errorf("sqlite: dead errors: %w", err)
	}
	where, args := itemWhere(f)
	rows, err := s.r.QueryContext(ctx, `SELECT pipeline, stage, COALESCE(reason_class, ''), COALESCE(reason_error, ''), COUNT(*) AS n
		FROM items WHERE `+where+` GROUP BY 1, 2, 3, 4 ORDER BY n DESC, 1, 2, 3, 4`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: dead errors: %w", err)
	}
	out, err := scanErrorCounts(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: dead errors: %w", err)
	}
	return out, nil
}

// AttemptErrors counts the failed attempts of f's run, pipeline and stage
// by pipeline, stage, class and exact error.
func (s *Store) AttemptErrors(ctx context.Context, f redrive.ItemFilter) ([]redrive.ErrorCount, error) {
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
	if f.Stage != "" {
		where = append(where, "stage = ?")
		args = append(args, f.Stage)
	}
	if f.Class != "" {
		where = append(where, "class = ?")
		args = append(args, f.Class)
	}
	if f.ErrorContains != "" {
		where = append(where, "instr(lower(error), lower(?)) > 0")
		args = append(args, f.ErrorContains)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT pipeline, stage, class, error, COUNT(*) AS n
		FROM attempts WHERE `+strings.Join(where, " AND ")+` GROUP BY 1, 2, 3, 4 ORDER BY n DESC, 1, 2, 3, 4`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: attempt errors: %w", err)
	}
	out, err := scanErrorCounts(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: attempt errors: %w", err)
	}
	return out, nil
}

// scanErrorCounts reads and closes rows of pipeline, stage, class, error
// and count.
func scanErrorCounts(rows *sql.Rows) ([]redrive.ErrorCount, error) {
	defer rows.Close()
	var out []redrive.ErrorCount
	for rows.Next() {
		var e redrive.ErrorCount
		if err := rows.Scan(&e.Pipeline, &e.Stage, &e.Class, &e.Error, &e.Count); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
