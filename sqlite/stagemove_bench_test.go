package sqlite

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// BenchmarkStageMove measures what the trigger that keeps each stage's
// input (migration 0003) costs a completion. Two stores, the second without
// the trigger, each get batches of 1,000 items completed as moves to the
// next stage with a new 200-byte payload, alternating which goes first;
// the benchmark reports µs per move for each and their ratio, from one run.
func BenchmarkStageMove(b *testing.B) {
	const batch = 1000
	ctx := context.Background()
	kept := openTest(b, filepath.Join(b.TempDir(), "kept.db"))
	bare := openTest(b, filepath.Join(b.TempDir(), "bare.db"))
	if _, err := bare.w.ExecContext(ctx, `DROP TRIGGER items_stage_input`); err != nil {
		b.Fatal(err)
	}
	payload := bytes.Repeat([]byte("x"), 200)
	items := make([]redrive.NewItem, batch)
	for i := range items {
		items[i].Payload = payload
	}
	move := func(s *Store) time.Duration {
		run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Items: items, Now: time.Now()}); err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "bench", Pipelines: []string{"p"}, Limit: batch,
			Now: now, LeaseUntil: now.Add(time.Hour)})
		if err != nil || len(ls) != batch {
			b.Fatalf("claimed %d, %v; want %d", len(ls), err, batch)
		}
		cs := make([]redrive.Completion, len(ls))
		for i, l := range ls {
			cs[i] = redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StatePending,
				Stage: "b", StageIndex: 1, NextAt: now.Add(time.Hour), Payload: payload, Now: now,
				Record: redrive.Attempt{Stage: "a", StageIndex: 0, Number: 1, Outcome: redrive.OutcomeSucceeded,
					StartedAt: now, FinishedAt: now}}
		}
		start := time.Now()
		if _, err := s.Complete(ctx, cs); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var withTrigger, without time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			withTrigger += move(kept)
			without += move(bare)
		} else {
			without += move(bare)
			withTrigger += move(kept)
		}
	}
	n := float64(b.N * batch)
	b.ReportMetric(float64(withTrigger.Nanoseconds())/1e3/n, "µs/move-kept")
	b.ReportMetric(float64(without.Nanoseconds())/1e3/n, "µs/move-bare")
	b.ReportMetric(float64(withTrigger)/float64(without), "kept/bare")
}
