package metrics_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/metrics"
	"github.com/redrive/redrive/retry"
)

// TestTimeToSuccessHistogram runs a real engine on SQLite: items enqueued
// while no worker runs, then worked two hours later by the engine's clock.
// redrive_item_time_to_success_seconds{pipeline} counts every succeeded
// item once (none of the dead), its sum is the store's record of enqueue to
// last attempt, and the two hours land in the hours buckets.
func TestTimeToSuccessHistogram(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := openStore(t)
	m := metrics.New(store, metrics.Options{})
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	var offset atomic.Int64 // added to the engine's clock
	client := redrive.NewClient(store, redrive.Config{
		Workers: 4, PollInterval: 5 * time.Millisecond, RunCheckInterval: 10 * time.Millisecond,
		Now:       func() time.Time { return time.Now().Add(time.Duration(offset.Load())) },
		Observers: []func(redrive.Event){m.Observe},
	})
	policy := retry.Policy{MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, JitterMode: retry.JitterNone}
	err := client.Register(redrive.Pipeline{Name: "reports", Stages: []redrive.Stage{
		{Name: "render", Policy: policy, Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
			n, _ := strconv.Atoi(it.Key)
			switch {
			case n%4 == 0:
				return nil, retry.Final(errors.New("template missing"))
			case n%3 == 0 && it.Attempt == 0:
				return nil, errors.New("renderer busy")
			}
			return []byte("pdf"), nil
		}},
		{Name: "upload", Policy: policy, Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
			return it.Payload, nil
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	items := make([]redrive.NewItem, 20)
	for i := range items {
		items[i] = redrive.NewItem{Key: strconv.Itoa(i + 1), Payload: []byte("{}")}
	}
	run, err := client.StartRun(ctx, "reports", items, redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(2 * time.Hour))
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := client.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	run, err = client.WaitRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Counts.Succeeded != 15 || run.Counts.Dead != 5 {
		t.Fatalf("counts %+v, want 15 succeeded and 5 dead", run.Counts)
	}
	// The store's record: enqueue to the finish of the last attempt.
	succeeded, err := store.ListItems(ctx, redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StateSucceeded}})
	if err != nil {
		t.Fatal(err)
	}
	var want float64
	for _, it := range succeeded {
		as, err := store.Attempts(ctx, it.ID)
		if err != nil || len(as) == 0 {
			t.Fatal(as, err)
		}
		want += as[len(as)-1].FinishedAt.Sub(it.EnqueuedAt).Seconds()
	}
	h := histogram(t, reg, "redrive_item_time_to_success_seconds", "reports")
	if h.GetSampleCount() != 15 {
		t.Errorf("sample count %d, want 15 (succeeded items only)", h.GetSampleCount())
	}
	if math.Abs(h.GetSampleSum()-want) > 1e-6*want {
		t.Errorf("sample sum %v s, want %v s from the store", h.GetSampleSum(), want)
	}
	for _, b := range h.GetBucket() {
		le, n := b.GetUpperBound(), b.GetCumulativeCount()
		switch {
		case le < 2*3600 && n != 0:
			t.Errorf("bucket le=%v has %d items; every item took just over 2 h", le, n)
		case le >= 4*3600 && n != 15:
			t.Errorf("bucket le=%v has %d items, want 15", le, n)
		}
	}
}

// histogram returns the histogram series of name whose pipeline label is
// pipeline.
func histogram(t *testing.T, reg prometheus.Gatherer, name, pipeline string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == "pipeline" && lp.GetValue() == pipeline {
					return mt.GetHistogram()
				}
			}
		}
	}
	t.Fatalf("no %s{pipeline=%q} series", name, pipeline)
	return nil
}
