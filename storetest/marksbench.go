package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// BenchmarkMarks measures what the audit marks of an action on n items
// cost next to the action itself, on s (a fresh store): n pending items
// are canceled, then redriven, each action preceded by the MarkItems that
// links its items. It reports each step in ms and the ratio of marking to
// the action it marks. One op is one cancel and one redrive of n items.
func BenchmarkMarks(b *testing.B, s redrive.Store, n int) {
	ctx := context.Background()
	items := make([]redrive.NewItem, 1000)
	for i := range items {
		items[i].Payload = []byte(`{"id":12345,"text":"some input of a typical size for a work item"}`)
	}
	var markCancel, cancel, markRedrive, redriveT time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, Base)
		if err != nil {
			b.Fatal(err)
		}
		for done := 0; done < n; done += len(items) {
			if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Items: items[:min(len(items), n-done)], Now: Base}); err != nil {
				b.Fatal(err)
			}
		}
		f := redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StatePending}}
		b.StartTimer()
		step := func(d *time.Duration, fn func() (int, error)) {
			start := time.Now()
			got, err := fn()
			*d += time.Since(start)
			if err != nil || got != n {
				b.Fatalf("%d items, %v; want %d", got, err, n)
			}
		}
		id, err := s.RecordAction(ctx, redrive.AuditAction{At: Base, Actor: "bench", Kind: "cancel"})
		if err != nil {
			b.Fatal(err)
		}
		step(&markCancel, func() (int, error) { return s.MarkItems(ctx, id, f) })
		step(&cancel, func() (int, error) {
			return s.CancelPending(ctx, f, redrive.Reason{Class: redrive.ClassCanceled, Error: "bench", At: Base})
		})
		f.States = []redrive.State{redrive.StateCanceled}
		if id, err = s.RecordAction(ctx, redrive.AuditAction{At: Base, Actor: "bench", Kind: "redrive"}); err != nil {
			b.Fatal(err)
		}
		step(&markRedrive, func() (int, error) { return s.MarkItems(ctx, id, f) })
		step(&redriveT, func() (int, error) { return s.Redrive(ctx, f, Base, 0) })
	}
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
	b.ReportMetric(ms(markCancel), "mark-cancel-ms")
	b.ReportMetric(ms(cancel), "cancel-ms")
	b.ReportMetric(ms(markRedrive), "mark-redrive-ms")
	b.ReportMetric(ms(redriveT), "redrive-ms")
	b.ReportMetric(float64(markCancel)/float64(cancel), "mark/cancel")
	b.ReportMetric(float64(markRedrive)/float64(redriveT), "mark/redrive")
}
