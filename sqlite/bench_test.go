package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// BenchmarkEnqueue enqueues batches of 1,000 items; one op is one item.
func BenchmarkEnqueue(b *testing.B) {
	ctx := context.Background()
	s := openTest(b, filepath.Join(b.TempDir(), "bench.db"))
	run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	const batch = 1000
	items := make([]redrive.NewItem, batch)
	for i := range items {
		items[i].Payload = []byte(`{"n":1}`)
	}
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a",
			Items: items[:n], Now: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "items/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e3, "cpu-µs/item")
}

// BenchmarkClaimComplete claims 256 items and completes them as succeeded,
// recording their attempts, in a loop, its records naming their items, runs
// and pipelines as the engine's do; one op is one completion.
func BenchmarkClaimComplete(b *testing.B) {
	for _, batch := range []int{64, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			benchClaimComplete(b, batch)
		})
	}
}

func benchClaimComplete(b *testing.B, batch int) {
	ctx := context.Background()
	s := openTest(b, filepath.Join(b.TempDir(), "bench.db"))
	run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	items := make([]redrive.NewItem, 1000)
	for i := range items {
		items[i].Payload = []byte(`{"n":1}`)
	}
	for n := 0; n < b.N+batch; n += len(items) {
		if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Items: items, Now: now}); err != nil {
			b.Fatal(err)
		}
	}
	cs := make([]redrive.Completion, 0, batch)
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for done := 0; done < b.N; {
		ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "bench", Pipelines: []string{"p"}, Limit: min(batch, b.N-done),
			Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil {
			b.Fatal(err)
		}
		if len(ls) == 0 {
			b.Fatal("nothing to claim")
		}
		cs = cs[:0]
		for _, l := range ls {
			cs = append(cs, redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StateSucceeded,
				Stage: "a", Attempt: 1, Now: now, Payload: l.Item.Payload,
				Record: redrive.Attempt{ItemID: l.Item.ID, RunID: l.Item.RunID, Pipeline: l.Item.Pipeline, Stage: "a", Number: 1,
					Outcome: redrive.OutcomeSucceeded, StartedAt: now, FinishedAt: now}})
		}
		ap, err := s.Complete(ctx, cs)
		if err != nil {
			b.Fatal(err)
		}
		for _, ok := range ap {
			if !ok {
				b.Fatal("completion not applied")
			}
		}
		done += len(ls)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "completions/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e3, "cpu-µs/completion")
}

// cpuTime returns the process's user and system CPU time: on a shared
// machine it measures the cost of an operation better than the wall clock.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
