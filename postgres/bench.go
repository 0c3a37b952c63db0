package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

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
	if _, err := s.pool.Exec(ctx, `ANALYZE `+s.q+`.items`); err != nil {
		return 0, 0, s.fail("claim latency: analyze", err)
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
