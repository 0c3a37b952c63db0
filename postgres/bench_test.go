package postgres_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
)

const benchBatch = 500

func benchItems(n int) []redrive.NewItem {
	items := make([]redrive.NewItem, n)
	for i := range items {
		items[i].Payload = []byte(`{"id":12345,"text":"some input of a typical size for a work item"}`)
	}
	return items
}

// BenchmarkEnqueue inserts batches of 500 items.
func BenchmarkEnqueue(b *testing.B) {
	ctx := context.Background()
	s := pgtest.OpenStore(b)
	run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	items := benchItems(benchBatch)
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Items: items, Now: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "items/s")
}

// BenchmarkEnqueueParallel inserts batches of 500 items from 4 goroutines.
func BenchmarkEnqueueParallel(b *testing.B) {
	ctx := context.Background()
	s := pgtest.OpenStore(b)
	run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	items := benchItems(benchBatch)
	b.SetParallelism(2) // 2 × GOMAXPROCS goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Items: items, Now: time.Now()}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "items/s")
}

// BenchmarkClaimComplete claims batches of 500 items of a one-stage no-op
// pipeline and completes them as succeeded, from `workers` goroutines.
func BenchmarkClaimComplete(b *testing.B) {
	for _, workers := range []int{1, 2, 4} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) { benchClaimComplete(b, workers) })
	}
}

func benchClaimComplete(b *testing.B, workers int) {
	ctx := context.Background()
	s := pgtest.OpenStore(b)
	run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	items := benchItems(5000)
	// b.N batches of 500 items, plus slack so that no worker runs dry.
	for left := (b.N + workers) * benchBatch; left > 0; left -= len(items) {
		if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a",
			Items: items[:min(left, len(items))], Now: time.Now().Add(-time.Second)}); err != nil {
			b.Fatal(err)
		}
	}
	s.Pool().Exec(ctx, `ANALYZE `+s.Schema()+`.items`)
	var (
		mu    sync.Mutex
		left  = b.N
		total int
	)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if left == 0 {
					mu.Unlock()
					return
				}
				left--
				mu.Unlock()
				now := time.Now()
				ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "bench", Pipelines: []string{"p"}, Limit: benchBatch,
					LeaseUntil: now.Add(time.Minute), Now: now})
				if err != nil {
					b.Error(err)
					return
				}
				cs := make([]redrive.Completion, len(ls))
				for i, l := range ls {
					cs[i] = redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StateSucceeded,
						Stage: "a", Attempt: 1, Now: now,
						Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: redrive.OutcomeSucceeded, StartedAt: now, FinishedAt: now}}
				}
				if _, err := s.Complete(ctx, cs); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				total += len(ls)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if total != b.N*benchBatch {
		b.Fatalf("worked %d items, want %d", total, b.N*benchBatch)
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "items/s")
}

// BenchmarkClaimLatency reports the median and p95 latency of claiming 100
// items with 10,000 pending and, when REDRIVE_BENCH_1M=1, with 1,000,000
// pending as well (it takes about a minute to fill), each in a schema of
// its own, and then the ratios 1M/10k (the goal is at most 2). Run it with
// -benchtime=1x: one fill and 200 samples per backlog, whatever b.N.
func BenchmarkClaimLatency(b *testing.B) {
	backlogs := []int{10_000}
	if os.Getenv("REDRIVE_BENCH_1M") == "1" {
		backlogs = append(backlogs, 1_000_000)
	}
	var p50s, p95s []time.Duration
	for _, n := range backlogs {
		s := pgtest.OpenStore(b)
		p50, p95, err := s.ClaimLatency(context.Background(), n, 100, 200)
		if err != nil {
			b.Fatal(err)
		}
		p50s, p95s = append(p50s, p50), append(p95s, p95)
		suffix := "-" + strconv.Itoa(n/1000) + "k"
		b.ReportMetric(float64(p50.Microseconds()), "p50-µs"+suffix)
		b.ReportMetric(float64(p95.Microseconds()), "p95-µs"+suffix)
	}
	if len(backlogs) == 2 {
		b.ReportMetric(float64(p50s[1])/float64(p50s[0]), "p50-ratio-1M/10k")
		b.ReportMetric(float64(p95s[1])/float64(p95s[0]), "p95-ratio-1M/10k")
	}
}
