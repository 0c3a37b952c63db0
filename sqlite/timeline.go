package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/redrive/redrive"
)

// Timeline counts attempts by pipeline, stage and time bucket in one
// aggregate over the attempts_timeline index (migration 0013), which covers
// every column it reads: the cost follows the attempts of the time range.
func (s *Store) Timeline(ctx context.Context, f redrive.TimelineFilter) ([]redrive.TimelineBucket, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("sqlite: timeline: %w", err)
	}
	q := `SELECT pipeline, stage, (finished_at - ?1) / ?2 AS b, count(*),
		sum(outcome = 'succeeded'), sum(outcome = 'retry'), sum(outcome = 'rate_limited'),
		sum(outcome = 'dead'), sum(outcome = 'lost')
		FROM attempts INDEXED BY attempts_timeline
		WHERE finished_at >= ?1 AND finished_at < ?3`
	args := []any{f.Since.UnixNano(), int64(f.Step), f.Until.UnixNano()}
	if f.Pipeline != "" {
		args = append(args, f.Pipeline)
		q += fmt.Sprintf(" AND pipeline = ?%d", len(args))
	}
	if f.RunID != 0 {
		args = append(args, f.RunID)
		q += fmt.Sprintf(" AND run_id = ?%d", len(args))
	}
	q += ` GROUP BY pipeline, stage, b ORDER BY pipeline, stage, b`
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: timeline: %w", err)
	}
	defer rows.Close()
	var out []redrive.TimelineBucket
	for rows.Next() {
		var b redrive.TimelineBucket
		if err := rows.Scan(&b.Pipeline, &b.Stage, &b.Bucket, &b.Attempts, &b.Succeeded, &b.Retried, &b.RateLimited, &b.Dead, &b.Lost); err != nil {
			return nil, fmt.Errorf("sqlite: timeline: %w", err)
		}
		b.Start = f.Since.Add(time.Duration(b.Bucket) * f.Step).UTC()
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: timeline: %w", err)
	}
	return out, nil
}

// LeaseLoads counts the running items by lease owner, pipeline and stage.
// Running items are few (the workers' concurrency, plus leases of workers
// that vanished) and the items_lease partial index holds exactly them.
func (s *Store) LeaseLoads(ctx context.Context, now time.Time, sample int) ([]redrive.LeaseLoad, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT owner, pipeline, stage, id, n, expired FROM (
		SELECT coalesce(lease_owner, '') AS owner, pipeline, stage, id,
			row_number() OVER (PARTITION BY lease_owner, pipeline, stage ORDER BY id) AS rn,
			count(*) OVER (PARTITION BY lease_owner, pipeline, stage) AS n,
			sum(coalesce(lease_expires_at, 0) < ?1) OVER (PARTITION BY lease_owner, pipeline, stage) AS expired
		FROM items WHERE state = 'running')
		WHERE rn <= max(?2, 1) ORDER BY owner, pipeline, stage, id`, now.UnixNano(), sample)
	if err != nil {
		return nil, fmt.Errorf("sqlite: lease loads: %w", err)
	}
	defer rows.Close()
	var out []redrive.LeaseLoad
	for rows.Next() {
		var l redrive.LeaseLoad
		var id int64
		if err := rows.Scan(&l.Owner, &l.Pipeline, &l.Stage, &id, &l.Count, &l.Expired); err != nil {
			return nil, fmt.Errorf("sqlite: lease loads: %w", err)
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
		return nil, fmt.Errorf("sqlite: lease loads: %w", err)
	}
	return out, nil
}
