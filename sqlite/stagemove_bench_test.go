package sqlite

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"path/filepath"
)

// BenchmarkStageMove measures what keeping each stage's input costs a
// completion. Each iteration claims two batches of 1,000 items and
// completes one as retries at the same stage (no input to keep) and the
// other as moves to the next stage with a new 200-byte payload (the input
// of that stage, kept for RedriveFrom), alternating which goes first. It
// reports both as µs per item and their ratio, taken in one run so that
// the load of a shared machine cancels out.
func BenchmarkStageMove(b *testing.B) {
	const batch = 1000
	ctx := context.Background()
	s := openTest(b, filepath.Join(b.TempDir(), "bench.db"))
	run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	payload := bytes.Repeat([]byte("x"), 200)
	items := make([]redrive.NewItem, batch)
	for i := range items {
		items[i].Payload = payload
	}
	var retry, move time.Duration
	complete := func(moveOn bool) time.Duration {
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
			c := redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StatePending,
				Stage: "a", StageIndex: 0, Attempt: 1, NextAt: now.Add(time.Hour), Now: now,
				Record: redrive.Attempt{Stage: "a", StageIndex: 0, Number: 1, Outcome: redrive.OutcomeRetry,
					Class: "retryable", Error: "boom", StartedAt: now, FinishedAt: now}}
			if moveOn {
				c.Stage, c.StageIndex, c.Attempt, c.Payload = "b", 1, 0, payload
				c.Record.Outcome, c.Record.Class, c.Record.Error = redrive.OutcomeSucceeded, "", ""
			}
			cs[i] = c
		}
		start := time.Now()
		applied, err := s.Complete(ctx, cs)
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		for i, ok := range applied {
			if !ok {
				b.Fatalf("completion %d not applied", i)
			}
		}
		return d
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			retry += complete(false)
			move += complete(true)
		} else {
			move += complete(true)
			retry += complete(false)
		}
	}
	n := float64(b.N * batch)
	b.ReportMetric(float64(retry.Microseconds())/n, "µs/retry")
	b.ReportMetric(float64(move.Microseconds())/n, "µs/move")
	b.ReportMetric(float64(move)/float64(retry), "move/retry")
}
