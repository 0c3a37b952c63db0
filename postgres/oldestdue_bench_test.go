package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
)

// BenchmarkOldestDue times the oldest-due reading with 100,000 ready items:
// "fresh", enqueued together (the walk of items_ready stops after one item
// per priority), and "retries", all ordered before their due time, so that
// no item can end the walk early and it reads every one of them, the most
// it reads.
func BenchmarkOldestDue(b *testing.B) {
	const n = 100_000
	for _, shape := range []string{"fresh", "retries"} {
		b.Run(shape, func(b *testing.B) {
			ctx := context.Background()
			s := pgtest.OpenStore(b)
			t0 := time.Now().Add(-time.Hour)
			run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, t0)
			if err != nil {
				b.Fatal(err)
			}
			items := benchItems(5000)
			for left := n; left > 0; left -= len(items) {
				if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Items: items, Now: t0}); err != nil {
					b.Fatal(err)
				}
			}
			if shape == "retries" {
				due := t0.Add(30 * time.Minute)
				for {
					ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "w", Pipelines: []string{"p"}, Limit: 5000,
						LeaseUntil: due.Add(time.Minute), Now: t0.Add(time.Minute)})
					if err != nil {
						b.Fatal(err)
					}
					if len(ls) == 0 {
						break
					}
					cs := make([]redrive.Completion, len(ls))
					for i, l := range ls {
						cs[i] = done(l, redrive.StatePending, due)
					}
					if _, err := s.Complete(ctx, cs); err != nil {
						b.Fatal(err)
					}
				}
			}
			now := time.Now()
			b.ResetTimer()
			for b.Loop() {
				if t, err := s.OldestDue(ctx, now); err != nil || t.IsZero() {
					b.Fatalf("OldestDue = %v, %v", t, err)
				}
			}
		})
	}
}
