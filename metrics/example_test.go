package metrics_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/metrics"
	"github.com/redrive/redrive/sqlite"
)

// Feed engine events to Prometheus. In a program, Observe goes in
// redrive.Config.Observers and the engine sends the events; here two
// attempts of an item and its move to the dead-letter queue are observed
// by hand, and the registry is gathered as a scrape would. The dead-letter
// counters of a stage start at 0 for every class as soon as the stage is
// seen, so that rate() and increase() alerts see the first dead item.
func ExampleMetrics_Observe() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "redrive-metrics-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "redrive.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	m := metrics.New(store, metrics.Options{})
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		fmt.Println(err)
		return
	}
	// With an engine: redrive.NewClient(store, redrive.Config{Observers: []func(redrive.Event){m.Observe}})

	m.Observe(redrive.AttemptFinished{Pipeline: "summarize", Stage: "llm_call", RunID: 1, ItemID: 7, Attempt: 1,
		Outcome: redrive.OutcomeRetry, Class: "retryable", Error: "HTTP 503", Duration: 120 * time.Millisecond, Delay: time.Second})
	m.Observe(redrive.AttemptFinished{Pipeline: "summarize", Stage: "llm_call", RunID: 1, ItemID: 7, Attempt: 2,
		Outcome: redrive.OutcomeDead, Class: "final", Error: "HTTP 400", Duration: 80 * time.Millisecond})
	m.Observe(redrive.DeadLettered{Pipeline: "summarize", RunID: 1, ItemID: 7,
		Reason: redrive.Reason{Stage: "llm_call", Class: "final", Error: "HTTP 400", Attempts: 2, At: time.Now()}})

	families, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range families {
		if f.GetName() != "redrive_attempts_total" && f.GetName() != "redrive_dead_lettered_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			fmt.Print(f.GetName(), "{")
			for i, l := range s.GetLabel() {
				if i > 0 {
					fmt.Print(",")
				}
				fmt.Printf("%s=%q", l.GetName(), l.GetValue())
			}
			fmt.Println("}", s.GetCounter().GetValue())
		}
	}
	// Output:
	// redrive_attempts_total{class="final",outcome="dead",pipeline="summarize",stage="llm_call"} 1
	// redrive_attempts_total{class="retryable",outcome="retry",pipeline="summarize",stage="llm_call"} 1
	// redrive_dead_lettered_total{class="final",pipeline="summarize",stage="llm_call"} 1
	// redrive_dead_lettered_total{class="lost",pipeline="summarize",stage="llm_call"} 0
	// redrive_dead_lettered_total{class="rate_limited",pipeline="summarize",stage="llm_call"} 0
	// redrive_dead_lettered_total{class="retryable",pipeline="summarize",stage="llm_call"} 0
}
