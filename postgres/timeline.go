package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// Timeline counts attempts by pipeline, stage and time bucket in one
// aggregate over the attempts_timeline index (migration 0013), which covers
// every column it reads: the cost follows the attempts of the time range.
func (s *Store) Timeline(ctx context.Context, f redrive.TimelineFilter) ([]redrive.TimelineBucket, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("postgres: timeline: %w", err)
	}
	// Microseconds are the precision of timestamptz; the bucket is computed
	// in integers so that a bucket edge is exact.
	q := `SELECT pipeline, stage,
		((extract(epoch FROM finished_at - $1::timestamptz) * 1000000)::bigint / $2::bigint)::int AS b,
		count(*)::int, (count(*) FILTER (WHERE outcome = 'succeeded'))::int, (count(*) FILTER (WHERE outcome = 'retry'))::int,
		(count(*) FILTER (WHERE outcome = 'rate_limited'))::int, (count(*) FILTER (WHERE outcome = 'dead'))::int,
		(count(*) FILTER (WHERE outcome = 'lost'))::int
		FROM ` + s.q + `.attempts
		WHERE finished_at >= $1 AND finished_at < $3`
	args := []any{f.Since, f.Step.Microseconds(), f.Until}
	if f.Pipeline != "" {
		args = append(args, f.Pipeline)
		q += fmt.Sprintf(" AND pipeline = $%d", len(args))
	}
	if f.RunID != 0 {
		args = append(args, f.RunID)
		q += fmt.Sprintf(" AND run_id = $%d", len(args))
	}
	q += ` GROUP BY pipeline, stage, b ORDER BY pipeline, stage, b`
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.fail("timeline", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (redrive.TimelineBucket, error) {
		var b redrive.TimelineBucket
		err := row.Scan(&b.Pipeline, &b.Stage, &b.Bucket, &b.Attempts, &b.Succeeded, &b.Retried, &b.RateLimited, &b.Dead, &b.Lost)
		b.Start = f.Since.Add(time.Duration(b.Bucket) * f.Step).UTC()
		return b, err
	})
	if err != nil {
		return nil, s.fail("timeline", err)
	}
	return out, nil
}

// LeaseLoads counts the running items by lease owner, pipeline and stage.
// Running items are few (the workers' concurrency, plus leases of workers
// that vanished).
func (s *Store) LeaseLoads(ctx context.Context, now time.Time, sample int) ([]redrive.LeaseLoad, error) {
	rows, err := s.pool.Query(ctx, `SELECT owner, pipeline, stage, id, n, expired FROM (
		SELECT lease_owner AS owner, pipeline, stage, id,
			row_number() OVER (PARTITION BY lease_owner, pipeline, stage ORDER BY id) AS rn,
			(count(*) OVER (PARTITION BY lease_owner, pipeline, stage))::int AS n,
			(count(*) FILTER (WHERE lease_expires_at < $1) OVER (PARTITION BY lease_owner, pipeline, stage))::int AS expired
		FROM `+s.q+`.items WHERE `+s.stateCond(nil, redrive.StateRunning)+`) r
		WHERE rn <= greatest($2::int, 1) ORDER BY owner, pipeline, stage, id`, now, sample)
	if err != nil {
		return nil, s.fail("lease loads", err)
	}
	defer rows.Close()
	var out []redrive.LeaseLoad
	for rows.Next() {
		var l redrive.LeaseLoad
		var id int64
		if err := rows.Scan(&l.Owner, &l.Pipeline, &l.Stage, &id, &l.Count, &l.Expired); err != nil {
			return nil, s.fail("lease loads", err)
		}
		if n := len(out); n == 0 || out[n-1].Owner != l.Owner || out[n-1].Pipeline != l.Pipeline || out[n-1].Stage != l.Stage {
			l.ItemIDs = []int64{}
			out = append(out, l)
		}
		if sample > 0 {
			last := &out[len(out)-1]
			last.ItemIDs = append(last.ItemIDs, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("lease loads", err)
	}
	return out, nil
}
