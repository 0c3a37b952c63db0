package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/redrive/redrive"
)

// BacklogResult is what `redrive bench --shape backlog` measured: claim
// latency of a store holding only due items, and of the same store once
// most of its items wait on a backoff.
type BacklogResult struct {
	Store      string  `json:"store"`
	Items      int     `json:"items"`
	Due        int     `json:"due"`
	Waiting    int     `json:"waiting"`
	ClaimLimit int     `json:"claim_limit"`
	Samples    int     `json:"samples"`
	DueOnlyP50 float64 `json:"due_only_p50_ms"`
	DueOnlyP95 float64 `json:"due_only_p95_ms"`
	BacklogP50 float64 `json:"backlog_p50_ms"`
	BacklogP95 float64 `json:"backlog_p95_ms"`
	RatioP50   float64 `json:"ratio_p50"`
	RatioP95   float64 `json:"ratio_p95"`
	// On PostgreSQL, the backlog's figures again once the items table has
	// been vacuumed since the backlog was made (the entries its rows left
	// in the ready index are dead until then).
	VacuumedP50      float64 `json:"vacuumed_backlog_p50_ms,omitempty"`
	VacuumedP95      float64 `json:"vacuumed_backlog_p95_ms,omitempty"`
	VacuumedRatioP50 float64 `json:"vacuumed_ratio_p50,omitempty"`
	VacuumWaitSecond float64 `json:"vacuum_wait_seconds,omitempty"`
	VacuumedBy       string  `json:"vacuumed_by,omitempty"`
	SetupSecond      float64 `json:"setup_seconds"`
}

// Backlog measures claims of limit items with the public Store
// API, first against a store holding only the due items (items minus
// waiting), then after waiting more items were enqueued, claimed and
// completed as failed attempts retried in an hour. The waiting items have a
// higher priority, so a claim that walked pending items in claim order
// would meet every one of them before the first due item. No statistics
// are refreshed by hand.
func Backlog(ctx context.Context, store redrive.Store, items, waiting, limit, samples int) (BacklogResult, error) {
	res := BacklogResult{Items: items, Due: items - waiting, Waiting: waiting, ClaimLimit: limit, Samples: samples}
	const p = "bench_backlog"
	t0 := time.Now()
	run, _, err := store.CreateRun(ctx, p, redrive.RunOptions{}, t0)
	if err != nil {
		return res, err
	}
	payload := []byte(`{"n":1}`)
	enqueue := func(n, prio int) error {
		batch := make([]redrive.NewItem, 5000)
		for i := range batch {
			batch[i] = redrive.NewItem{Payload: payload, Priority: prio}
		}
		for left := n; left > 0; left -= len(batch) {
			b := batch[:min(left, len(batch))]
			if _, err := store.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: p, Stage: "a", Items: b, Now: time.Now()}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := enqueue(res.Due, 0); err != nil {
		return res, err
	}
	res.DueOnlyP50, res.DueOnlyP95, err = claimSamples(ctx, store, p, limit, samples)
	if err != nil {
		return res, err
	}

	// The waiting backlog: claimed ahead of the due items by priority,
	// failed, and retried in an hour.
	if err := enqueue(waiting, 1); err != nil {
		return res, err
	}
	for left := waiting; left > 0; {
		now := time.Now()
		ls, err := store.Claim(ctx, redrive.ClaimRequest{Owner: "bench", Pipelines: []string{p}, Limit: min(left, 2000),
			LeaseUntil: now.Add(time.Minute), Now: now})
		if err != nil {
			return res, err
		}
		cs := make([]redrive.Completion, 0, len(ls))
		for _, l := range ls {
			if l.Item.Priority != 1 {
				return res, fmt.Errorf("bench: claimed a due item (priority %d) before the backlog", l.Item.Priority)
			}
			cs = append(cs, redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StatePending,
				Stage: l.Item.Stage, Attempt: 1, NextAt: now.Add(time.Hour), Now: now,
				Record: redrive.Attempt{ItemID: l.Item.ID, RunID: l.Item.RunID, Pipeline: l.Item.Pipeline, Stage: l.Item.Stage, Number: 1, Outcome: redrive.OutcomeRetry,
					Class: "retryable", Error: "503 service unavailable", StartedAt: now, FinishedAt: now, Delay: time.Hour}})
		}
		if _, err := store.Complete(ctx, cs); err != nil {
			return res, err
		}
		left -= len(ls)
	}
	setupEnd := time.Now()
	res.SetupSecond = setupEnd.Sub(t0).Seconds()
	res.BacklogP50, res.BacklogP95, err = claimSamples(ctx, store, p, limit, samples)
	if err != nil {
		return res, err
	}
	res.RatioP50 = res.BacklogP50 / res.DueOnlyP50
	res.RatioP95 = res.BacklogP95 / res.DueOnlyP95
	if w, ok := store.(interface {
		Vacuumed(ctx context.Context, since time.Time) (string, error)
	}); ok {
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		how, err := w.Vacuumed(wctx, setupEnd)
		if err != nil {
			return res, fmt.Errorf("bench: waiting for a vacuum: %w", err)
		}
		res.VacuumedBy = how
		res.VacuumWaitSecond = time.Since(start).Seconds()
		res.VacuumedP50, res.VacuumedP95, err = claimSamples(ctx, store, p, limit, samples)
		if err != nil {
			return res, err
		}
		res.VacuumedRatioP50 = res.VacuumedP50 / res.DueOnlyP50
	}
	return res, nil
}

// claimSamples times samples claims of limit due items, releasing each
// batch again, and returns the median and 95th percentile in milliseconds.
func claimSamples(ctx context.Context, store redrive.Store, p string, limit, samples int) (p50, p95 float64, err error) {
	ds := make([]time.Duration, 0, samples)
	for range samples {
		now := time.Now()
		start := time.Now()
		ls, err := store.Claim(ctx, redrive.ClaimRequest{Owner: "bench", Pipelines: []string{p}, Limit: limit,
			LeaseUntil: now.Add(time.Minute), Now: now})
		if err != nil {
			return 0, 0, err
		}
		ds = append(ds, time.Since(start))
		if len(ls) != limit {
			return 0, 0, fmt.Errorf("bench: claimed %d due items, want %d", len(ls), limit)
		}
		refs := make([]redrive.LeaseRef, len(ls))
		for i, l := range ls {
			if l.Item.Priority != 0 {
				return 0, 0, fmt.Errorf("bench: claimed a waiting item %d", l.Item.ID)
			}
			refs[i] = l.Ref()
		}
		if err := store.Release(ctx, refs, now); err != nil {
			return 0, 0, err
		}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return ms(ds[len(ds)/2]), ms(ds[len(ds)*95/100]), nil
}

// PrintBacklog writes r as `redrive bench --shape backlog` prints it.
func PrintBacklog(w io.Writer, r BacklogResult) {
	fmt.Fprintf(w, "store              %s\n", r.Store)
	fmt.Fprintf(w, "items              %d: %d due, %d waiting on a backoff (setup %.1fs)\n", r.Items, r.Due, r.Waiting, r.SetupSecond)
	fmt.Fprintf(w, "claims             %d items each, %d samples\n", r.ClaimLimit, r.Samples)
	fmt.Fprintf(w, "due items only     p50 %.2f ms  p95 %.2f ms\n", r.DueOnlyP50, r.DueOnlyP95)
	fmt.Fprintf(w, "with the backlog   p50 %.2f ms  p95 %.2f ms\n", r.BacklogP50, r.BacklogP95)
	fmt.Fprintf(w, "ratio              p50 %.2f  p95 %.2f\n", r.RatioP50, r.RatioP95)
	if r.VacuumedBy != "" {
		fmt.Fprintf(w, "after a vacuum     p50 %.2f ms  p95 %.2f ms  ratio p50 %.2f (%s, after %.0fs)\n",
			r.VacuumedP50, r.VacuumedP95, r.VacuumedRatioP50, r.VacuumedBy, r.VacuumWaitSecond)
	}
}
