package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/redrive/redrive"
)

// GetRunStatus returns a run without its counts (Counts is zero), or an
// error wrapping redrive.ErrNotFound: one indexed row, where GetRun also
// counts the run's items by state, which costs a submit to a large run
// more than its insert. redrive.Submit uses it.
func (s *Store) GetRunStatus(ctx context.Context, id int64) (redrive.Run, error) {
	r, err := scanRun(s.r.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("sqlite: get run status %d: %w", id, redrive.ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("sqlite: get run status %d: %w", id, err)
	}
	return r, nil
}

// PipelineExists reports whether any run of pipeline exists, without
// counting any run's items, as ListRuns does for each run it lists: the
// check of a filter by pipeline (redrive.CheckFilter) cost every page of
// the dead-letter queue filtered by pipeline 7 – 10 ms at a million dead
// items for the newest run's counts.
func (s *Store) PipelineExists(ctx context.Context, pipeline string) (bool, error) {
	var ok bool
	if err := s.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE pipeline = ?)`, pipeline).Scan(&ok); err != nil {
		return false, fmt.Errorf("sqlite: pipeline exists: %w", err)
	}
	return ok, nil
}
