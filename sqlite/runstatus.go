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
