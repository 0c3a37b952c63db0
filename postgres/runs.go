package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/redrive/redrive"
)

// querier is what pgxpool.Pool and pgx.Tx have in common.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// runSelect selects runs with their counts (the sums of their run_counts
// rows); append WHERE/ORDER/LIMIT.
func (s *Store) runSelect() string {
	return `SELECT r.id, r.pipeline, r.name, r.status, r.success_threshold, r.partial_threshold,
		r.failure_budget, r.min_items, r.created_at, r.finished_at, r.reason, r.source, r.source_hash,
		c.total, c.pending, c.running, c.succeeded, c.dead, c.canceled, c.purged
	FROM ` + s.q + `.runs r
	CROSS JOIN LATERAL (SELECT coalesce(sum(n), 0)::bigint AS total,
		coalesce(sum(n) FILTER (WHERE c.state = 'pending'), 0)::bigint AS pending,
		coalesce(sum(n) FILTER (WHERE c.state = 'running'), 0)::bigint AS running,
		coalesce(sum(n) FILTER (WHERE c.state = 'succeeded'), 0)::bigint AS succeeded,
		coalesce(sum(n) FILTER (WHERE c.state = 'dead'), 0)::bigint AS dead,
		coalesce(sum(n) FILTER (WHERE c.state = 'canceled'), 0)::bigint AS canceled,
		coalesce(sum(n) FILTER (WHERE c.state = 'purged'), 0)::bigint AS purged
		FROM ` + s.q + `.run_counts c WHERE c.run_id = r.id) c`
}

func scanRun(row pgx.Row) (redrive.Run, error) {
	var (
		r        redrive.Run
		status   string
		minItems int32
		finished *time.Time
		c        [7]int64
	)
	err := row.Scan(&r.ID, &r.Pipeline, &r.Name, &status, &r.Options.SuccessThreshold, &r.Options.PartialThreshold,
		&r.Options.FailureBudget, &minItems, &r.CreatedAt, &finished, &r.Reason, &r.Options.Source, &r.Options.SourceHash,
		&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6])
	if err != nil {
		return r, err
	}
	r.Status = redrive.RunStatus(status)
	r.Options.Name = r.Name
	r.Options.MinItems = int(minItems)
	r.CreatedAt = r.CreatedAt.UTC()
	if finished != nil {
		r.FinishedAt = finished.UTC()
	}
	r.Counts = redrive.Counts{Total: int(c[0]), Pending: int(c[1]), Running: int(c[2]),
		Succeeded: int(c[3]), Dead: int(c[4]), Canceled: int(c[5]), Purged: int(c[6])}
	return r, nil
}

// CreateRun creates a run of pipeline p, or returns the existing run of
// that pipeline and opts.Name with created false.
func (s *Store) CreateRun(ctx context.Context, p string, opts redrive.RunOptions, now time.Time) (redrive.Run, bool, error) {
	r, created, err := s.createRun(ctx, s.pool, p, opts, now)
	if err != nil {
		return r, false, s.fail("create run", err)
	}
	return r, created, nil
}

// CreateRunTx is CreateRun in the caller's transaction: the run exists if
// and only if tx commits.
func (s *Store) CreateRunTx(ctx context.Context, tx pgx.Tx, p string, opts redrive.RunOptions, now time.Time) (redrive.Run, bool, error) {
	r, created, err := s.createRun(ctx, tx, p, opts, now)
	if err != nil {
		return r, false, s.fail("create run", err)
	}
	return r, created, nil
}

func (s *Store) createRun(ctx context.Context, q querier, p string, opts redrive.RunOptions, now time.Time) (redrive.Run, bool, error) {
	if p == "" {
		return redrive.Run{}, false, errors.New("empty pipeline")
	}
	if err := opts.Validate(); err != nil {
		return redrive.Run{}, false, err
	}
	sql := `WITH ins AS (
		INSERT INTO ` + s.q + `.runs (pipeline, name, status, success_threshold, partial_threshold,
			failure_budget, min_items, created_at, source, source_hash)
		VALUES ($1, $2, 'running', $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (pipeline, name) WHERE name <> '' DO NOTHING
		RETURNING id)
	SELECT id, true FROM ins
	UNION ALL
	SELECT id, false FROM ` + s.q + `.runs
	WHERE pipeline = $1 AND name = $2 AND $2 <> '' AND NOT EXISTS (SELECT 1 FROM ins)`
	// A concurrent creator of the same name can commit between our
	// snapshot and our insert: then neither branch sees a row. Try again.
	for try := 0; ; try++ {
		var id int64
		var created bool
		err := q.QueryRow(ctx, sql, p, opts.Name, opts.SuccessThreshold, opts.PartialThreshold,
			opts.FailureBudget, opts.MinItems, now, opts.Source, opts.SourceHash).Scan(&id, &created)
		if errors.Is(err, pgx.ErrNoRows) && try < 3 {
			continue
		}
		if err != nil {
			return redrive.Run{}, false, err
		}
		r, err := scanRun(q.QueryRow(ctx, s.runSelect()+` WHERE r.id = $1`, id))
		return r, created, err
	}
}

// GetRun returns a run with its counts, or an error wrapping
// redrive.ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id int64) (redrive.Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, s.runSelect()+` WHERE r.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("postgres: get run %d: %w", id, redrive.ErrNotFound)
	}
	if err != nil {
		return r, s.fail("get run", err)
	}
	return r, nil
}

// ListRuns lists runs, newest first, with their counts.
func (s *Store) ListRuns(ctx context.Context, f redrive.RunFilter) ([]redrive.Run, error) {
	var a args
	where := "true"
	if f.Pipeline != "" {
		where += " AND r.pipeline = " + a.add(f.Pipeline)
	}
	if f.Status != "" {
		where += " AND r.status = " + a.add(string(f.Status))
	}
	if f.BeforeID > 0 {
		where += " AND r.id < " + a.add(f.BeforeID)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, s.runSelect()+` WHERE `+where+` ORDER BY r.id DESC LIMIT `+a.add(limit), a...)
	if err != nil {
		return nil, s.fail("list runs", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (redrive.Run, error) { return scanRun(row) })
	if err != nil {
		return nil, s.fail("list runs", err)
	}
	return out, nil
}

// SetRunStatus sets the status of a run, its finish time and reason. With
// status running it reopens the run: its finish time is cleared.
func (s *Store) SetRunStatus(ctx context.Context, id int64, status redrive.RunStatus, reason string, at time.Time) error {
	var finished *time.Time
	if status != redrive.RunRunning {
		finished = &at
	}
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.q+`.runs SET status = $2, reason = $3, finished_at = $4 WHERE id = $1`,
		id, string(status), reason, finished)
	if err != nil {
		return s.fail("set run status", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: set run status %d: %w", id, redrive.ErrNotFound)
	}
	return nil
}

// FinishRun sets a running run's final status, finish time and reason, and
// reports whether it did; see redrive.Store.
func (s *Store) FinishRun(ctx context.Context, id int64, status redrive.RunStatus, reason string, at time.Time) (bool, error) {
	switch status {
	case redrive.RunCompleted, redrive.RunPartialSuccess, redrive.RunFailed, redrive.RunAborted:
	default:
		return false, fmt.Errorf("postgres: finish run: %q is not a final status", status)
	}
	var done, exists bool
	err := s.pool.QueryRow(ctx, `WITH upd AS (
		UPDATE `+s.q+`.runs SET status = $2, reason = $3, finished_at = $4 WHERE id = $1 AND status = 'running' RETURNING id)
	SELECT EXISTS (SELECT 1 FROM upd), EXISTS (SELECT 1 FROM `+s.q+`.runs WHERE id = $1)`,
		id, string(status), reason, at).Scan(&done, &exists)
	if err != nil {
		return false, s.fail("finish run", err)
	}
	if !exists {
		return false, fmt.Errorf("postgres: finish run %d: %w", id, redrive.ErrNotFound)
	}
	return done, nil
}
