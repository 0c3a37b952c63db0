package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/metrics"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/sqlite"
)

// countingStore is the real SQLite store with a count of the queries the
// metrics make, to check the gauge cache. It is not a mock: every call
// goes to the database.
type countingStore struct {
	*sqlite.Store
	calls atomic.Int64
}

func (s *countingStore) StateCounts(ctx context.Context, runID int64) ([]redrive.StateCount, error) {
	s.calls.Add(1)
	return s.Store.StateCounts(ctx, runID)
}

func (s *countingStore) OldestDue(ctx context.Context, now time.Time) (time.Time, error) {
	s.calls.Add(1)
	return s.Store.OldestDue(ctx, now)
}

func (s *countingStore) ListItems(ctx context.Context, f redrive.ItemFilter) ([]redrive.Item, error) {
	s.calls.Add(1)
	return s.Store.ListItems(ctx, f)
}

func openStore(t *testing.T) *countingStore {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &countingStore{Store: s}
}

// clock is a settable clock for the metrics' cache and stuck threshold.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var errFlaky = errors.New("flaky dependency")

// runPipeline runs a real engine over store: 40 items through two stages,
// with retryable failures, rate limits, final failures and exhausted
// attempts, and returns the finished run.
func runPipeline(t *testing.T, store redrive.Store, m *metrics.Metrics) redrive.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	policy := retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, JitterMode: retry.JitterNone}
	var mu sync.Mutex
	seen := map[string]int{}
	count := func(stage string, it *redrive.Item) int {
		mu.Lock()
		defer mu.Unlock()
		k := stage + "/" + it.Key
		seen[k]++
		return seen[k]
	}
	num := func(it *redrive.Item) int { n, _ := strconv.Atoi(it.Key); return n }
	p := redrive.Pipeline{Name: "docs", Stages: []redrive.Stage{
		{Name: "fetch", Policy: policy, Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
			n, c := num(it), count("fetch", it)
			switch {
			case n%5 == 0:
				return nil, retry.Final(fmt.Errorf("document %d is corrupt", n))
			case n%3 == 0 && c == 1:
				return nil, retry.Retryable(errFlaky)
			case n%7 == 0 && c == 1:
				return nil, retry.RateLimited(errors.New("429 too many requests"), time.Millisecond)
			}
			return it.Payload, nil
		}},
		{Name: "embed", Policy: policy, Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
			if n := num(it); n%11 == 0 {
				return nil, retry.Retryable(errors.New("model overloaded"))
			}
			return []byte("ok"), nil
		}},
	}}
	client := redrive.NewClient(store, redrive.Config{
		Workers: 8, PollInterval: 5 * time.Millisecond, RunCheckInterval: 10 * time.Millisecond,
		Observers: []func(redrive.Event){m.Observe},
	})
	if err := client.Register(p); err != nil {
		t.Fatal(err)
	}
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
	items := make([]redrive.NewItem, 40)
	for i := range items {
		items[i] = redrive.NewItem{Key: strconv.Itoa(i + 1), Payload: []byte("doc")}
	}
	run, err := client.StartRun(ctx, "docs", items, redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run, err = client.WaitRun(ctx, run.ID)
	if err != nil {
		t.Fatalf("wait run: %v", err)
	}
	return run
}

// series returns the values of a gathered metric family by its label
// values joined with "/", in label-name order.
func series(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var key []string
			for _, lp := range m.GetLabel() {
				key = append(key, lp.GetValue())
			}
			out[strings.Join(key, "/")] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

func TestMetricsMatchStoreAfterRun(t *testing.T) {
	store := openStore(t)
	m := metrics.New(store, metrics.Options{})
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	run := runPipeline(t, store, m)
	ctx := context.Background()
	if run.Counts.Dead == 0 || run.Counts.Succeeded == 0 {
		t.Fatalf("want a run with dead and succeeded items, got %+v", run.Counts)
	}

	// Attempts: the counter by outcome equals the attempt rows.
	items, err := store.ListItems(ctx, redrive.ItemFilter{RunID: run.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]float64{}
	var total, retries, rateLimited float64
	for _, it := range items {
		atts, err := store.Attempts(ctx, it.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range atts {
			class := a.Class
			if class == "" {
				class = metrics.ClassNone
			}
			// Label order is alphabetical in the gathered output:
			// class, outcome, pipeline, stage.
			rows[class+"/"+string(a.Outcome)+"/"+a.Pipeline+"/"+a.Stage]++
			total++
			switch a.Outcome {
			case redrive.OutcomeRetry:
				retries++
			case redrive.OutcomeRateLimited:
				retries++
				rateLimited++
			}
		}
	}
	attempts := series(t, reg, "redrive_attempts_total")
	if !mapsEqual(attempts, rows) {
		t.Errorf("redrive_attempts_total = %v, attempt rows = %v", attempts, rows)
	}
	if got := sum(series(t, reg, "redrive_stage_duration_seconds")); got != total {
		t.Errorf("stage duration observations = %v, attempts = %v", got, total)
	}
	if got := sum(series(t, reg, "redrive_retries_scheduled_total")); got != retries {
		t.Errorf("redrive_retries_scheduled_total = %v, retry and rate-limited attempts = %v", got, retries)
	}
	if got := sum(series(t, reg, "redrive_retry_delay_seconds")); got != retries {
		t.Errorf("retry delay observations = %v, want %v", got, retries)
	}
	if got := sum(series(t, reg, "redrive_rate_limited_total")); got != rateLimited || rateLimited == 0 {
		t.Errorf("redrive_rate_limited_total = %v, rate-limited attempts = %v (want > 0)", got, rateLimited)
	}

	// Dead letters: the counter by stage and class equals the dead items.
	deadItems, err := store.ListItems(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	wantDead := map[string]float64{}
	for _, it := range deadItems {
		wantDead[it.Reason.Class+"/"+it.Pipeline+"/"+it.Reason.Stage]++
	}
	if got := series(t, reg, "redrive_dead_lettered_total"); !mapsEqual(got, wantDead) {
		t.Errorf("redrive_dead_lettered_total = %v, dead items = %v", got, wantDead)
	}
	if float64(run.Counts.Dead) != sum(wantDead) {
		t.Errorf("run counts %d dead, store lists %v", run.Counts.Dead, sum(wantDead))
	}

	// Items: the gauges equal StateCounts.
	counts, err := store.StateCounts(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantItems := map[string]float64{}
	for _, c := range counts {
		wantItems[c.Pipeline+"/"+c.Stage+"/"+string(c.State)] += float64(c.Count)
	}
	if got := series(t, reg, "redrive_items"); !mapsEqual(got, wantItems) {
		t.Errorf("redrive_items = %v, StateCounts = %v", got, wantItems)
	}
	if got := series(t, reg, "redrive_items_stuck"); !mapsEqual(got, map[string]float64{"docs": 0}) {
		t.Errorf("redrive_items_stuck = %v, want docs=0", got)
	}
	if got := series(t, reg, "redrive_oldest_due_age_seconds"); got[""] != 0 {
		t.Errorf("redrive_oldest_due_age_seconds = %v, want 0", got)
	}
	runs := series(t, reg, "redrive_runs_finished_total")
	if runs["docs/"+string(run.Status)] != 1 || sum(runs) != 1 {
		t.Errorf("redrive_runs_finished_total = %v, want docs/%s = 1", runs, run.Status)
	}
	// Every final status and the usual dead-letter classes exist from the
	// first event, at zero, so that increase() sees their first increment.
	if _, ok := runs["docs/aborted"]; !ok || len(runs) != 4 {
		t.Errorf("redrive_runs_finished_total series = %v, want the 4 final statuses of docs", runs)
	}
	if _, ok := series(t, reg, "redrive_dead_lettered_total")["lost/docs/embed"]; !ok {
		t.Error("redrive_dead_lettered_total{class=lost,stage=embed} not exported at zero")
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// mapsEqual compares series values; a missing series equals a zero one.
func mapsEqual(a, b map[string]float64) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// seed writes items straight into the store: n pending items of pipeline
// p enqueued at t, and claims claimed of them with a lease until t+1m.
func seed(t *testing.T, store redrive.Store, p string, n, claimed int, at time.Time) {
	t.Helper()
	ctx := context.Background()
	run, _, err := store.CreateRun(ctx, p, redrive.RunOptions{}, at)
	if err != nil {
		t.Fatal(err)
	}
	items := make([]redrive.NewItem, n)
	if _, err := store.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: p, Stage: "s1", Items: items, Now: at}); err != nil {
		t.Fatal(err)
	}
	if claimed > 0 {
		ls, err := store.Claim(ctx, redrive.ClaimRequest{Owner: "test", Pipelines: []string{p}, Limit: claimed, LeaseUntil: at.Add(time.Minute), Now: at})
		if err != nil || len(ls) != claimed {
			t.Fatalf("claim: %d leases, %v", len(ls), err)
		}
	}
}

func TestGaugeCacheTTL(t *testing.T) {
	store := openStore(t)
	clk := &clock{now: time.Now()}
	seed(t, store, "p", 3, 0, clk.Now())
	m := metrics.New(store, metrics.Options{Now: clk.Now, GaugeCacheTTL: 10 * time.Second})
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	if got := series(t, reg, "redrive_items"); got["p/s1/pending"] != 3 {
		t.Fatalf("redrive_items = %v", got)
	}
	calls := store.calls.Load()
	if calls == 0 {
		t.Fatal("the first scrape did not query the store")
	}
	seed(t, store, "p", 2, 0, clk.Now())
	clk.Add(9 * time.Second)
	if got := series(t, reg, "redrive_items"); got["p/s1/pending"] != 3 {
		t.Errorf("within the TTL redrive_items = %v, want the cached 3", got)
	}
	if n := store.calls.Load(); n != calls {
		t.Errorf("a scrape within the TTL made %d store calls", n-calls)
	}
	clk.Add(2 * time.Second)
	if got := series(t, reg, "redrive_items"); got["p/s1/pending"] != 5 {
		t.Errorf("after the TTL redrive_items = %v, want 5", got)
	}
	if n := store.calls.Load(); n == calls {
		t.Error("a scrape after the TTL did not query the store")
	}
}

func TestStuckAndOldestDue(t *testing.T) {
	store := openStore(t)
	t0 := time.Now().Add(-time.Hour)
	seed(t, store, "late", 4, 1, t0)             // 3 pending due at t0, 1 running with lease until t0+1m
	seed(t, store, "fresh", 2, 0, time.Now())    // due now: not stuck
	clk := &clock{now: t0.Add(20 * time.Minute)} // 20 min after t0
	m := metrics.New(store, metrics.Options{Now: clk.Now, StuckAfter: 15 * time.Minute, GaugeCacheTTL: -1})
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	if got := series(t, reg, "redrive_items_stuck"); got["late"] != 4 || got["fresh"] != 0 {
		t.Errorf("redrive_items_stuck = %v, want late=4 fresh=0", got)
	}
	age := series(t, reg, "redrive_oldest_due_age_seconds")[""]
	if age < 20*60-1 || age > 20*60+1 {
		t.Errorf("redrive_oldest_due_age_seconds = %v, want 1200", age)
	}
	// Ten minutes after t0 the pending items are not stuck yet; the
	// running one is past its lease.
	clk.Add(-10 * time.Minute)
	if got := series(t, reg, "redrive_items_stuck"); got["late"] != 1 {
		t.Errorf("redrive_items_stuck = %v, want late=1", got)
	}
}

func TestBreakerBudgetAndRedriven(t *testing.T) {
	m := metrics.New(nil, metrics.Options{})
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	m.Observe(redrive.BreakerChanged{Pipeline: "p", Stage: "s", From: retry.BreakerClosed, To: retry.BreakerOpen})
	m.Observe(redrive.BreakerChanged{Pipeline: "p", Stage: "t", From: retry.BreakerOpen, To: retry.BreakerHalfOpen})
	if got := series(t, reg, "redrive_breaker_state"); got["p/s"] != 2 || got["p/t"] != 1 {
		t.Errorf("redrive_breaker_state = %v, want p/s=2 p/t=1", got)
	}
	m.Observe(&redrive.BreakerChanged{Pipeline: "p", Stage: "s", From: retry.BreakerHalfOpen, To: retry.BreakerClosed})
	if got := series(t, reg, "redrive_breaker_state"); got["p/s"] != 0 {
		t.Errorf("redrive_breaker_state = %v, want p/s=0", got)
	}
	m.Observe(redrive.Redriven{Count: 7})
	if got := series(t, reg, "redrive_redriven_total")[""]; got != 7 {
		t.Errorf("redrive_redriven_total = %v, want 7", got)
	}
	b := retry.NewBudget(retry.BudgetOptions{Ratio: 0.5, MinPerSecond: -1})
	m.TrackBudget("llm", b)
	for range 10 {
		b.OnRequest()
	}
	for range 3 {
		b.TryRetry()
	}
	if got := series(t, reg, "redrive_retry_budget_requests"); got["llm"] != 10 {
		t.Errorf("redrive_retry_budget_requests = %v, want llm=10", got)
	}
	if got := series(t, reg, "redrive_retry_budget_retries"); got["llm"] != 3 {
		t.Errorf("redrive_retry_budget_retries = %v, want llm=3", got)
	}
	if got := series(t, reg, "redrive_retry_budget_retry_ratio"); got["llm"] != 0.3 {
		t.Errorf("redrive_retry_budget_retry_ratio = %v, want llm=0.3", got)
	}
	m.TrackBudget("llm", nil)
	if got := series(t, reg, "redrive_retry_budget_requests"); len(got) != 0 {
		t.Errorf("untracked budget still exported: %v", got)
	}
}

// TestNames checks that Names lists exactly the metrics exported, so that
// dashboards and alerts checked against it cannot drift.
func TestNames(t *testing.T) {
	store := openStore(t)
	seed(t, store, "p", 1, 0, time.Now())
	m := metrics.New(store, metrics.Options{})
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []redrive.Event{
		redrive.AttemptFinished{Pipeline: "p", Stage: "s", Outcome: redrive.OutcomeRetry, Class: "retryable", Duration: time.Second},
		redrive.RetryScheduled{Pipeline: "p", Stage: "s", Delay: time.Second, RateLimited: true},
		redrive.DeadLettered{Pipeline: "p", Reason: redrive.Reason{Stage: "s", Class: "final"}},
		redrive.Rescued{Pipeline: "p", Stage: "s"},
		redrive.RunFinished{Run: redrive.Run{Pipeline: "p", Status: redrive.RunAborted}},
		redrive.BreakerChanged{Pipeline: "p", Stage: "s", To: retry.BreakerOpen},
		redrive.Redriven{Count: 1},
		redrive.ItemSucceeded{Pipeline: "p", EnqueuedAt: time.Unix(0, 0), At: time.Unix(3, 0)},
	} {
		m.Observe(ev)
	}
	m.TrackBudget("b", retry.NewBudget(retry.BudgetOptions{}))
	m.TrackFlows(func() []redrive.FlowState { return []redrive.FlowState{{Dependency: "p/s"}} })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		got = append(got, mf.GetName())
	}
	slices.Sort(got)
	if want := metrics.Names(); !slices.Equal(got, want) {
		t.Errorf("gathered %v\nNames() %v", got, want)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestNamespace(t *testing.T) {
	m := metrics.New(nil, metrics.Options{Namespace: "jobs"})
	m.Observe(redrive.Redriven{Count: 2})
	if n, err := testutil.GatherAndCount(prometheus.Gatherers{gatherer(t, m)}, "jobs_redriven_total"); err != nil || n != 1 {
		t.Errorf("jobs_redriven_total: %d series, %v", n, err)
	}
}

func gatherer(t *testing.T, c prometheus.Collector) prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestRegisterTwice(t *testing.T) {
	m := metrics.New(nil, metrics.Options{})
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	err := m.Register(reg)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Errorf("second Register = %v, want a wrapped AlreadyRegisteredError", err)
	}
}

// TestObserveDoesNotAllocate checks the hot path: once a label set was
// seen, recording an event allocates nothing.
func TestObserveDoesNotAllocate(t *testing.T) {
	m := metrics.New(nil, metrics.Options{})
	evs := []redrive.Event{
		redrive.AttemptFinished{Pipeline: "p", Stage: "s", Outcome: redrive.OutcomeSucceeded, Duration: time.Millisecond},
		redrive.RetryScheduled{Pipeline: "p", Stage: "s", Delay: time.Second},
		redrive.DeadLettered{Pipeline: "p", Reason: redrive.Reason{Stage: "s", Class: "final"}},
		redrive.Rescued{Pipeline: "p", Stage: "s"},
		redrive.ItemSucceeded{Pipeline: "p", EnqueuedAt: time.Unix(0, 0), At: time.Unix(3, 0)},
	}
	for _, ev := range evs {
		m.Observe(ev)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		for _, ev := range evs {
			m.Observe(ev)
		}
	})
	if allocs != 0 {
		t.Errorf("Observe allocates %v times per round", allocs)
	}
}

func TestObserveConcurrent(t *testing.T) {
	m := metrics.New(nil, metrics.Options{})
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				m.Observe(redrive.AttemptFinished{Pipeline: "p", Stage: "s" + strconv.Itoa(i%4), Outcome: redrive.OutcomeSucceeded})
				if i%100 == 0 && g == 0 {
					_, _ = reg.Gather()
				}
			}
		})
	}
	wg.Wait()
	if got := sum(series(t, reg, "redrive_attempts_total")); got != 8000 {
		t.Errorf("redrive_attempts_total = %v, want 8000", got)
	}
}

func BenchmarkObserve(b *testing.B) {
	m := metrics.New(nil, metrics.Options{})
	var ev redrive.Event = redrive.AttemptFinished{Pipeline: "p", Stage: "s", Outcome: redrive.OutcomeRetry, Class: "retryable", Duration: time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Observe(ev)
		}
	})
}

// TestThresholdsPerPipeline: each pipeline's stuck threshold decides its
// stuck items; the thresholds in use are exported for the alert rules,
// defaults for pipelines without their own, and a change of
// Options.Thresholds (a reload) shows at the next refresh.
func TestThresholdsPerPipeline(t *testing.T) {
	store := openStore(t)
	t0 := time.Now().Add(-time.Hour)
	seed(t, store, "ocr", 3, 0, t0)     // due at t0
	seed(t, store, "mail", 2, 0, t0)    // due at t0
	seed(t, store, "billing", 2, 0, t0) // due at t0
	clk := &clock{now: t0.Add(20 * time.Minute)}
	custom := map[string]metrics.Thresholds{
		"ocr":  {StuckAfter: time.Hour, DeadLettersWarning: 50},         // slow by design: not stuck yet
		"mail": {StuckAfter: 5 * time.Minute, DeadLettersCritical: 200}, // stuck
	}
	var mu sync.Mutex
	m := metrics.New(store, metrics.Options{Now: clk.Now, GaugeCacheTTL: -1, DeadLettersCritical: 5000, Thresholds: func() map[string]metrics.Thresholds {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(custom)
	}})
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	if got := series(t, reg, "redrive_items_stuck"); !mapsEqual(got, map[string]float64{"ocr": 0, "mail": 2, "billing": 2}) {
		t.Errorf("redrive_items_stuck = %v, want ocr=0 (1 h threshold) mail=2 billing=2 (15 min default)", got)
	}
	if got := series(t, reg, "redrive_stuck_after_seconds"); !mapsEqual(got, map[string]float64{"ocr": 3600, "mail": 300, "billing": 900}) {
		t.Errorf("redrive_stuck_after_seconds = %v", got)
	}
	want := map[string]float64{"ocr/warning": 50, "ocr/critical": 5000, "mail/warning": 10, "mail/critical": 200,
		"billing/warning": 10, "billing/critical": 5000}
	if got := series(t, reg, "redrive_alert_dead_letters_per_hour"); !mapsEqual(got, want) {
		t.Errorf("redrive_alert_dead_letters_per_hour = %v, want %v", got, want)
	}
	mu.Lock()
	custom = map[string]metrics.Thresholds{"billing": {StuckAfter: 30 * time.Minute}, "new": {DeadLettersWarning: 1}}
	mu.Unlock()
	if got := series(t, reg, "redrive_items_stuck"); !mapsEqual(got, map[string]float64{"ocr": 3, "mail": 2, "billing": 0}) {
		t.Errorf("after the change redrive_items_stuck = %v, want ocr=3 mail=2 billing=0", got)
	}
	if got := series(t, reg, "redrive_alert_dead_letters_per_hour")["new/warning"]; got != 1 {
		t.Errorf("a pipeline with thresholds and no items exports warning %v, want 1", got)
	}
}
