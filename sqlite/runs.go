package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redrive/redrive"
)

const runCols = `id, pipeline, name, status, options, created_at, finished_at, reason`

func scanRun(sc interface{ Scan(...any) error }) (redrive.Run, error) {
	var (
		r        redrive.Run
		status   string
		opts     string
		created  int64
		finished sql.NullInt64
	)
	if err := sc.Scan(&r.ID, &r.Pipeline, &r.Name, &status, &opts, &created, &finished, &r.Reason); err != nil {
		return r, err
	}
	r.Status = redrive.RunStatus(status)
	if opts != "" {
		if err := json.Unmarshal([]byte(opts), &r.Options); err != nil {
			return r, fmt.Errorf("run %d options: %w", r.ID, err)
		}
	}
	r.CreatedAt = ntz(created)
	r.FinishedAt = nt(finished)
	return r, nil
}

// CreateRun creates a run of pipeline p, or returns the run of p named
// opts.Name with created false when it exists.
func (s *Store) CreateRun(ctx context.Context, p string, opts redrive.RunOptions, now time.Time) (redrive.Run, bool, error) {
	if p == "" {
		return redrive.Run{}, false, errors.New("sqlite: create run: empty pipeline")
	}
	if err := opts.Validate(); err != nil {
		return redrive.Run{}, false, fmt.Errorf("sqlite: create run: %w", err)
	}
	b, err := json.Marshal(opts)
	if err != nil {
		return redrive.Run{}, false, fmt.Errorf("sqlite: create run: %w", err)
	}
	var (
		run     redrive.Run
		created bool
	)
	err = s.writeTx(ctx, "create run", func(tx *sql.Tx) error {
		if opts.Name != "" {
			r, err := scanRun(tx.QueryRowContext(ctx,
				`SELECT `+runCols+` FROM runs WHERE pipeline = ? AND name = ?`, p, opts.Name))
			switch {
			case err == nil:
				run = r
				run.Counts, err = runCounts(ctx, tx, r.ID)
				return err
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
		}
		res, err := tx.ExecContext(ctx,
			`INSERT INTO runs (pipeline, name, status, options, created_at) VALUES (?, ?, ?, ?, ?)`,
			p, opts.Name, string(redrive.RunRunning), string(b), tnz(now))
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		created = true
		run = redrive.Run{ID: id, Pipeline: p, Name: opts.Name, Status: redrive.RunRunning,
			Options: opts, CreatedAt: ntz(tnz(now))}
		return nil
	})
	if err != nil {
		return redrive.Run{}, false, err
	}
	return run, created, nil
}

// runCounts counts a run's items by state, its purged items and the
// succeeded items that retention deleted, which the run keeps counting (see
// redrive.Counts).
func runCounts(ctx context.Context, q queryer, id int64) (redrive.Counts, error) {
	var c redrive.Counts
	rows, err := q.QueryContext(ctx, `SELECT state, COUNT(*) FROM items WHERE run_id = ? GROUP BY state
		UNION ALL SELECT 'purged', purged FROM runs WHERE id = ? AND purged > 0
		UNION ALL SELECT 'retained', retained FROM runs WHERE id = ? AND retained > 0`, id, id, id)
	if err != nil {
		return c, err
	}
	defer rows.Close()
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return c, err
		}
		switch st {
		case "purged":
			c.Purged += n
			c.Total += n
			continue
		case "retained":
			st = string(redrive.StateSucceeded)
		}
		c.Add(redrive.State(st), n)
	}
	return c, rows.Err()
}

// GetRun returns a run with its counts, or an error wrapping
// redrive.ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id int64) (redrive.Run, error) {
	var run redrive.Run
	err := s.readTx(ctx, "get run", func(tx *sql.Tx) error {
		r, err := scanRun(tx.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: get run %d: %w", id, redrive.ErrNotFound)
		}
		if err != nil {
			return err
		}
		r.Counts, err = runCounts(ctx, tx, id)
		run = r
		return err
	})
	return run, err
}

// ListRuns lists runs, newest first, with their counts. f.Limit 0 means 100.
func (s *Store) ListRuns(ctx context.Context, f redrive.RunFilter) ([]redrive.Run, error) {
	var (
		where []string
		args  []any
	)
	if f.Pipeline != "" {
		where = append(where, "pipeline = ?")
		args = append(args, f.Pipeline)
	}
	if f.Status != "" {
		where = append(where, "status = ?")
		args = append(args, string(f.Status))
	}
	if f.BeforeID > 0 {
		where = append(where, "id < ?")
		args = append(args, f.BeforeID)
	}
	if f.Limit < 0 {
		return nil, errors.New("sqlite: list runs: negative limit")
	}
	limit := f.Limit
	if limit == 0 {
		limit = 100
	}
	q := `SELECT ` + runCols + ` FROM runs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit)
	var runs []redrive.Run
	err := s.readTx(ctx, "list runs", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanRun(rows)
			if err != nil {
				return err
			}
			runs = append(runs, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		for i := range runs {
			if runs[i].Counts, err = runCounts(ctx, tx, runs[i].ID); err != nil {
				return err
			}
		}
		return nil
	})
	return runs, err
}

// SetRunStatus sets a run's status, finish time and reason. Status running
// reopens the run: its finish time is cleared.
func (s *Store) SetRunStatus(ctx context.Context, id int64, status redrive.RunStatus, reason string, at time.Time) error {
	switch status {
	case redrive.RunRunning, redrive.RunCompleted, redrive.RunPartialSuccess, redrive.RunFailed, redrive.RunAborted:
	default:
		return fmt.Errorf("sqlite: set run status: unknown status %q", status)
	}
	var finished any = tn(at)
	if status == redrive.RunRunning {
		finished = nil
	}
	return s.writeTx(ctx, "set run status", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE runs SET status = ?, finished_at = ?, reason = ? WHERE id = ?`,
			string(status), finished, reason, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("sqlite: set run status %d: %w", id, redrive.ErrNotFound)
		}
		return nil
	})
}

// FinishRun sets a running run's final status, finish time and reason, and
// reports whether it did; see redrive.Store.
func (s *Store) FinishRun(ctx context.Context, id int64, status redrive.RunStatus, reason string, at time.Time) (bool, error) {
	switch status {
	case redrive.RunCompleted, redrive.RunPartialSuccess, redrive.RunFailed, redrive.RunAborted:
	default:
		return false, fmt.Errorf("sqlite: finish run: %q is not a final status", status)
	}
	done := false
	err := s.writeTx(ctx, "finish run", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE runs SET status = ?, finished_at = ?, reason = ? WHERE id = ? AND status = 'running'`,
			string(status), tn(at), reason, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			done = true
			return nil
		}
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, id).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("run %d: %w", id, redrive.ErrNotFound)
		} else if err != nil {
			return err
		}
		return nil
	})
	return done, err
}
