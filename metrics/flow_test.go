package metrics_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/metrics"
	"github.com/redrive/redrive/retry"
)

// TestFlowMetrics: a started client's dependencies export their rate, slow start,
// gate, time rate limited and calls paced; a 429 with Retry-After shows as a closed gate.
func TestFlowMetrics(t *testing.T) {
	store := openStore(t)
	m := metrics.New(store, metrics.Options{})
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	refused := make(chan struct{}, 1)
	client := redrive.NewClient(store, redrive.Config{PollInterval: 5 * time.Millisecond})
	err := client.Register(redrive.Pipeline{Name: "p", Stages: []redrive.Stage{
		{Name: "paced", RateLimit: redrive.RateLimit{Rate: 25}, Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) { return nil, nil }},
		{Name: "api", Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
			select {
			case refused <- struct{}{}:
				return nil, retry.RateLimited(errors.New("429"), time.Hour)
			default:
				return nil, nil
			}
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	m.TrackFlows(client.FlowStates)
	ctx := context.Background()
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer client.Stop(ctx)
	if got := series(t, reg, "redrive_flow_rate"); got["p/paced"] != 25 || got["p/api"] != 0 {
		t.Fatalf("redrive_flow_rate = %v, want p/paced=25 and p/api=0 (slow start)", got)
	}
	if got := series(t, reg, "redrive_flow_slow_start"); got["p/api"] != 1 || got["p/paced"] != 0 {
		t.Fatalf("redrive_flow_slow_start = %v", got)
	}
	if _, err := client.StartRun(ctx, "p", []redrive.NewItem{{Payload: []byte("{}")}}, redrive.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		g := series(t, reg, "redrive_flow_gate_closed_seconds")
		if g["p/api"] > 3500 && g["p/api"] <= 3600 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redrive_flow_gate_closed_seconds = %v, want p/api about 3600 after a 429 asking for an hour", g)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := series(t, reg, "redrive_flow_limited_seconds_total"); got["p/api"] < 0 || math.IsNaN(got["p/api"]) {
		t.Fatalf("redrive_flow_limited_seconds_total = %v", got)
	}
	// The item passed the paced stage (one call) before the api stage refused it.
	if got := series(t, reg, "redrive_flow_calls_total"); got["p/paced"] != 1 || got["p/api"] != 1 {
		t.Fatalf("redrive_flow_calls_total = %v, want one call through each stage's pace", got)
	}
}
