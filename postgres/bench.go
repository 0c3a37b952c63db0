package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// ClaimLatency measures how long Claim takes to lease limit items when
// backlog items are pending: it enqueues backlog items into a new run of
// pipeline "bench_latency" (in batches of 5,000), then claims limit items
// and releases them again, samples times, and returns the median and the
// 95th percentile. Use it on an empty schema: the items stay behind.
// Default limit 0 means 100; samples 0 means 200. The command's bench
// subcommand and the package's benchmarks call it.
func (s *Store) ClaimLatency(ctx context.Context, backlog, limit, samples int) (p50, p95 time.Duration, err error) {
	if limit <= 0 {
		limit = 100
	}
	if samples <= 0 {
		samples = 200
	}
	const p = "bench_latency"
	now := time.Now()
	run, _, err := s.CreateRun(ctx, p, redrive.RunOptions{}, now)
	if err != nil {
		return 0, 0, err
	}
	batch := make([]redrive.NewItem, 5000)
	for i := range batch {
		batch[i].Payload = []byte(`{"n":1}`)
	}
	for left := backlog; left > 0; left -= len(batch) {
		b := batch[:min(left, len(batch))]
		if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: p, Stage: "a", Items: b, Now: now}); err != nil {
			return 0, 0, err
		}
	}
	ds := make([]time.Duration, 0, samples)
	for i := 0; i < samples; i++ {
		now := time.Now()
		start := time.Now()
		ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "bench", Pipelines: []string{p}, Limit: limit,
			LeaseUntil: now.Add(time.Minute), Now: now})
		if err != nil {
			return 0, 0, err
		}
		ds = append(ds, time.Since(start))
		if len(ls) != min(limit, backlog) {
			return 0, 0, fmt.Errorf("postgres: claim latency: claimed %d, want %d", len(ls), min(limit, backlog))
		}
		refs := make([]redrive.LeaseRef, len(ls))
		for j, l := range ls {
			refs[j] = l.Ref()
		}
		if err := s.Release(ctx, refs, now); err != nil {
			return 0, 0, err
		}
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)*95/100], nil
}

// BareResult is what BareQueue measured.
type BareResult struct {
	// CopyPerSecond is how many rows of the items' shape COPY inserts per
	// second.
	CopyPerSecond float64
	// WorkPerSecond is how many jobs per second the loop of the two
	// statements a queue needs (a SKIP LOCKED batch claim and a batch
	// complete) works.
	WorkPerSecond float64
}

// BareQueue measures the limits that the store's own figures are compared
// with, on this server and in the same run: n rows COPYed into a table of
// the items' shape (id, run, pipeline, stage, state, priority, payload,
// times, lease) with a claim index, then worked by workers goroutines,
// each looping over a claim of batch rows (UPDATE ... WHERE id = ANY(SELECT
// ... ORDER BY priority, id LIMIT batch FOR UPDATE SKIP LOCKED)) and a
// complete of those rows (UPDATE ... WHERE id = ANY($1)), no attempts
// recorded, no fencing. The table lives in the store's schema for the
// measurement and is dropped after.
func (s *Store) BareQueue(ctx context.Context, n, batch, workers int, payload []byte) (BareResult, error) {
	var res BareResult
	t := s.q + ".bare_queue"
	defer func() { _, _ = s.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+t) }()
	var err error
	if res.CopyPerSecond, err = s.copyBare(ctx, n, payload); err != nil {
		return res, err
	}

	var done atomic.Int64
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		go func() {
			for done.Load() < int64(n) {
				rows, err := s.pool.Query(ctx, `UPDATE `+t+` SET state = 'running', lease_token = lease_token + 1,
					lease_owner = 'bare', lease_expires_at = now() + interval '1 minute', updated_at = now()
					WHERE id = ANY(ARRAY(SELECT id FROM `+t+` WHERE state = 'pending' AND next_at <= now()
						ORDER BY priority DESC, enqueued_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)) RETURNING id`, batch)
				if err != nil {
					errs <- err
					return
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				if err != nil {
					errs <- err
					return
				}
				if len(ids) == 0 {
					continue
				}
				if _, err := s.pool.Exec(ctx, `UPDATE `+t+` SET state = 'succeeded', lease_owner = '', lease_expires_at = NULL,
					updated_at = now() WHERE id = ANY($1)`, ids); err != nil {
					errs <- err
					return
				}
				done.Add(int64(len(ids)))
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			return res, s.fail("bare queue: work", err)
		}
	}
	res.WorkPerSecond = float64(n) / time.Since(start).Seconds()
	return res, nil
}

// CopyRate measures how many rows of the items' shape COPY inserts per
// second: n rows into a new table like BareQueue's, dropped after.
func (s *Store) CopyRate(ctx context.Context, n int, payload []byte) (float64, error) {
	defer func() { _, _ = s.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+s.q+`.bare_queue`) }()
	return s.copyBare(ctx, n, payload)
}

// copyBare creates the table bare_queue in the store's schema, a logged
// table of the items' columns with a primary key and a claim index, and
// COPYs n rows into it, returning rows per second.
func (s *Store) copyBare(ctx context.Context, n int, payload []byte) (float64, error) {
	t := s.q + ".bare_queue"
	if _, err := s.pool.Exec(ctx, `DROP TABLE IF EXISTS `+t+`;
		CREATE UNLOGGED TABLE `+t+` (LIKE `+s.q+`.items INCLUDING DEFAULTS)`); err != nil {
		return 0, s.fail("bare queue", err)
	}
	// A logged table, as items is; LIKE copied the columns only.
	if _, err := s.pool.Exec(ctx, `ALTER TABLE `+t+` SET LOGGED;
		ALTER TABLE `+t+` ADD PRIMARY KEY (id);
		CREATE INDEX ON `+t+` (priority DESC, enqueued_at, id) WHERE state = 'pending'`); err != nil {
		return 0, s.fail("bare queue", err)
	}
	now := time.Now()
	rows := make([][]any, n)
	for i := range rows {
		rows[i] = []any{int64(i + 1), int64(1), "bare", "a", "pending", int32(0), payload, payload, now, now, now, now, true}
	}
	start := time.Now()
	if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{s.schema, "bare_queue"},
		[]string{"id", "run_id", "pipeline", "stage", "state", "priority", "payload", "input", "enqueued_at", "next_at", "updated_at", "order_at", "ready"},
		pgx.CopyFromRows(rows)); err != nil {
		return 0, s.fail("bare queue: copy", err)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// Vacuumed returns once the items table has been vacuumed after since:
// it waits for autovacuum, or, on a server where autovacuum is off, runs
// VACUUM (not ANALYZE) itself, and says which. Benchmarks use it to
// measure a table in its steady state rather than just after a mass
// update, whose dead index entries only a vacuum removes.
func (s *Store) Vacuumed(ctx context.Context, since time.Time) (how string, err error) {
	var on bool
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('autovacuum')::bool`).Scan(&on); err != nil {
		return "", s.fail("vacuumed", err)
	}
	if !on {
		if _, err := s.pool.Exec(ctx, `VACUUM `+s.q+`.items`); err != nil {
			return "", s.fail("vacuumed", err)
		}
		return "VACUUM (autovacuum is off on this server)", nil
	}
	for {
		var last *time.Time
		err := s.pool.QueryRow(ctx, `SELECT last_autovacuum FROM pg_stat_user_tables WHERE relid = $1::regclass`,
			s.q+".items").Scan(&last)
		if err != nil {
			return "", s.fail("vacuumed", err)
		}
		if last != nil && last.After(since) {
			return "autovacuum", nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
