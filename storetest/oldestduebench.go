package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// BenchmarkOldestDue times OldestDue on s (a fresh store) holding n ready
// items of one of two shapes: "fresh", enqueued together, so that the walk
// of the ready index stops after one item; "retries", all of them retries
// ordered before their due time, so that none can end the walk and it
// reads every one of them (at n = 100,000, the most it reads).
func BenchmarkOldestDue(b *testing.B, s redrive.Store, shape string, n int) {
	ctx := context.Background()
	t0 := time.Now().Add(-time.Hour)
	run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, t0)
	if err != nil {
		b.Fatal(err)
	}
	items := make([]redrive.NewItem, 5000)
	for i := range items {
		items[i].Payload = []byte(`{"id":12345,"text":"some input of a typical size for a work item"}`)
	}
	for left := n; left > 0; left -= len(items) {
		if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Items: items[:min(left, len(items))], Now: t0}); err != nil {
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
				cs[i] = retry(l, due, due, "down")
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
}
