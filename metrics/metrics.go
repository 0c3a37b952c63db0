// Package metrics exports Prometheus metrics for a redrive engine.
//
// A Metrics has two sources. Engine events (see redrive.Event) feed its
// counters and histograms: put Observe in redrive.Config.Observers. The
// store feeds its gauges (items by state, stuck items, the age of the
// oldest due item): they are computed when Prometheus scrapes, from a few
// cheap store queries whose result is cached for Options.GaugeCacheTTL, so
// that many scrapers, or many processes sharing one database, do not load
// the store.
//
//	m := metrics.New(store, metrics.Options{})
//	if err := m.Register(prometheus.DefaultRegisterer); err != nil { ... }
//	client := redrive.NewClient(store, redrive.Config{Observers: []func(redrive.Event){m.Observe}})
//
// Labels are low-cardinality by design: pipeline, stage, state, outcome,
// class and run status. Item and run IDs never appear in labels.
//
// Counters count what this process observed since it started; with several
// worker processes, sum them in PromQL. Gauges computed from the store
// describe the whole database, so with several processes exporting them
// aggregate with max (or scrape one process), not sum.
package metrics

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry"
)

// Defaults of Options.
const (
	// DefaultNamespace prefixes every metric name.
	DefaultNamespace = "redrive"
	// DefaultGaugeCacheTTL is how long store-derived gauges are reused.
	DefaultGaugeCacheTTL = 10 * time.Second
	// DefaultStuckAfter is how long a pending item may be overdue before it
	// counts as stuck.
	DefaultStuckAfter = 15 * time.Minute
	// DefaultQueryTimeout bounds the store queries of one scrape.
	DefaultQueryTimeout = 5 * time.Second
	// DefaultStuckScanLimit caps the overdue pending items examined by one
	// refresh of redrive_items_stuck.
	DefaultStuckScanLimit = 10000
)

// Options configure a Metrics. Zero values take the stated defaults.
type Options struct {
	// Namespace prefixes every metric name. Default "redrive".
	Namespace string
	// GaugeCacheTTL is how long the gauges computed from the store are
	// reused before a scrape queries the store again. Default 10 s.
	// A negative value disables the cache.
	GaugeCacheTTL time.Duration
	// StuckAfter is how long a pending item may stay due without being
	// claimed before it counts in redrive_items_stuck; a running item
	// counts as soon as its lease expired without the rescuer taking it
	// over. Thresholds may set it per pipeline. Default 15 min.
	StuckAfter time.Duration
	// DeadLettersWarning is how many items one stage may dead-letter in
	// an hour before the warning alert fires, for pipelines whose
	// Thresholds do not say (exported as
	// redrive_alert_dead_letters_per_hour). Default 10.
	DeadLettersWarning float64
	// DeadLettersCritical is the dead letters an hour of one stage above
	// which the critical alert fires, for pipelines whose Thresholds do
	// not say. Default 1000.
	DeadLettersCritical float64
	// Thresholds returns the alert thresholds of the pipelines that have
	// their own (see Thresholds), by pipeline; it is called at each
	// refresh of the store-derived gauges, so that a reload of pipeline
	// files applies at the next scrape. Default nil: the defaults above
	// for every pipeline.
	Thresholds func() map[string]Thresholds
	// QueryTimeout bounds the store queries of one gauge refresh.
	// Default 5 s.
	QueryTimeout time.Duration
	// StuckScanLimit caps how many overdue pending items one refresh
	// examines to count stuck items; beyond it the gauge is a lower bound.
	// Default 10000.
	StuckScanLimit int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.GaugeCacheTTL == 0 {
		o.GaugeCacheTTL = DefaultGaugeCacheTTL
	}
	if o.StuckAfter <= 0 {
		o.StuckAfter = DefaultStuckAfter
	}
	if o.DeadLettersWarning <= 0 {
		o.DeadLettersWarning = DefaultDeadLettersWarning
	}
	if o.DeadLettersCritical <= 0 {
		o.DeadLettersCritical = DefaultDeadLettersCritical
	}
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = DefaultQueryTimeout
	}
	if o.StuckScanLimit <= 0 {
		o.StuckScanLimit = DefaultStuckScanLimit
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Metric names without the namespace prefix. Names joins them with the
// namespace.
const (
	nameAttempts        = "attempts_total"
	nameRetries         = "retries_scheduled_total"
	nameRateLimited     = "rate_limited_total"
	nameDeadLettered    = "dead_lettered_total"
	nameRedriven        = "redriven_total"
	nameRescued         = "rescued_total"
	nameRunsFinished    = "runs_finished_total"
	nameStageDuration   = "stage_duration_seconds"
	nameRetryDelay      = "retry_delay_seconds"
	nameBreakerState    = "breaker_state"
	nameItems           = "items"
	nameItemsStuck      = "items_stuck"
	nameOldestDueAge    = "oldest_due_age_seconds"
	nameBudgetRequests  = "retry_budget_requests"
	nameBudgetRetries   = "retry_budget_retries"
	nameBudgetRatio     = "retry_budget_retry_ratio"
	nameStoreErrors     = "metrics_store_errors_total"
	nameRefreshDuration = "metrics_refresh_duration_seconds"
	nameTimeToSuccess   = "item_time_to_success_seconds"
	nameRetainDeleted   = "retention_deleted_total"
	nameRetainBacklog   = "retention_backlog_items"
	nameRetainNotes     = "retention_backlog_notifications"
)

var allNames = []string{
	nameAttempts, nameRetries, nameRateLimited, nameDeadLettered, nameRedriven,
	nameRescued, nameRunsFinished, nameStageDuration, nameRetryDelay,
	nameBreakerState, nameItems, nameItemsStuck, nameOldestDueAge,
	nameBudgetRequests, nameBudgetRetries, nameBudgetRatio,
	nameStoreErrors, nameRefreshDuration, nameTimeToSuccess,
	nameRetainDeleted, nameRetainBacklog, nameRetainNotes,
	nameStuckAfter, nameDeadLetterAlerts,
	nameFlowRate, nameFlowSlowStart, nameFlowGate, nameFlowWaited, nameFlowLimited, nameFlowCalls,
}

// Names returns the names of every metric a Metrics exports with the
// default namespace, sorted. Histograms appear under their base name (the
// series carry the _bucket, _sum and _count suffixes). Dashboards and alert
// rules are checked against this list.
func Names() []string {
	out := make([]string, len(allNames))
	for i, n := range allNames {
		out[i] = DefaultNamespace + "_" + n
	}
	sort.Strings(out)
	return out
}

// DurationBuckets are the histogram buckets, in seconds, of
// redrive_stage_duration_seconds and redrive_retry_delay_seconds: from
// 1 ms to 1 h.
var DurationBuckets = []float64{
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
}

// TimeToSuccessBuckets are the histogram buckets, in seconds, of
// redrive_item_time_to_success_seconds: from 100 ms to 1 day, dense enough
// in seconds for items that pass at once and in hours for items that waited
// out long backoffs (ADR-0010's 30 s, 120 s and 480 s) or a redrive.
var TimeToSuccessBuckets = []float64{
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900, 1800,
	3600, 2 * 3600, 4 * 3600, 8 * 3600, 24 * 3600,
}

// Breaker state values of redrive_breaker_state.
const (
	// BreakerClosedValue: the breaker lets attempts through.
	BreakerClosedValue = 0
	// BreakerHalfOpenValue: the breaker lets a probe through.
	BreakerHalfOpenValue = 1
	// BreakerOpenValue: the breaker refuses attempts; the stage claims nothing.
	BreakerOpenValue = 2
)

// ClassNone is the class label of attempts that succeeded (they have no
// error class).
const ClassNone = "none"

// Metrics collects redrive metrics. It implements prometheus.Collector; its
// methods are safe for concurrent use.
type Metrics struct {
	store redrive.Store
	opts  Options

	attempts      *prometheus.CounterVec
	retries       *prometheus.CounterVec
	rateLimited   *prometheus.CounterVec
	deadLettered  *prometheus.CounterVec
	redriven      prometheus.Counter
	retainDeleted *prometheus.CounterVec
	retainBacklog prometheus.Gauge
	retainNotes   prometheus.Gauge
	rescued       *prometheus.CounterVec
	runsFinished  *prometheus.CounterVec
	stageDuration *prometheus.HistogramVec
	retryDelay    *prometheus.HistogramVec
	timeToSuccess *prometheus.HistogramVec
	breakerState  *prometheus.GaugeVec
	storeErrors   prometheus.Counter

	itemsDesc           *prometheus.Desc
	stuckDesc           *prometheus.Desc
	oldestDueDesc       *prometheus.Desc
	refreshDurationDesc *prometheus.Desc
	budgetRequestsDesc  *prometheus.Desc
	budgetRetriesDesc   *prometheus.Desc
	budgetRatioDesc     *prometheus.Desc

	attemptChildren cache[attemptKey, *attemptChildren]
	stageChildren   cache[stageKey, *stageChildren]
	deadChildren    cache[deadKey, prometheus.Counter]
	runChildren     cache[stageKey, prometheus.Counter] // {pipeline, status}
	breakers        cache[stageKey, prometheus.Gauge]
	successChildren cache[string, prometheus.Observer] // {pipeline}

	refreshMu sync.Mutex // serializes refreshes; guards the fields below
	cached    []prometheus.Metric
	cachedAt  time.Time

	budgetMu sync.Mutex // guards budgets and flows
	budgets  map[string]*retry.Budget
	flows    func() []redrive.FlowState

	flowDescs      flowDescs
	thresholdDescs thresholdDescs
}

// zeroClasses are the error classes whose dead-letter counters a stage
// exports at zero from its first event.
var zeroClasses = []string{retry.ClassFinal.String(), retry.ClassRetryable.String(), retry.ClassRateLimited.String(), redrive.ClassLost}

// finalStatuses are the run statuses whose counters a pipeline exports at
// zero from its first event.
var finalStatuses = []redrive.RunStatus{redrive.RunCompleted, redrive.RunPartialSuccess, redrive.RunFailed, redrive.RunAborted}

type attemptKey struct{ pipeline, stage, outcome, class string }

type attemptChildren struct {
	attempts prometheus.Counter
	duration prometheus.Observer
}

type stageKey struct{ pipeline, stage string }

type stageChildren struct {
	retries     prometheus.Counter
	rateLimited prometheus.Counter
	rescued     prometheus.Counter
	delay       prometheus.Observer
}

type deadKey struct{ pipeline, stage, class string }

// New returns a Metrics over store. A nil store disables the
// store-derived gauges (only event metrics are exported).
func New(store redrive.Store, opts Options) *Metrics {
	opts = opts.withDefaults()
	ns := opts.Namespace
	m := &Metrics{store: store, opts: opts, budgets: map[string]*retry.Budget{}, flowDescs: newFlowDescs(ns), thresholdDescs: newThresholdDescs(ns)}
	m.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: nameAttempts,
		Help: "Attempts recorded, by pipeline, stage, outcome (succeeded, retry, rate_limited, dead, lost) and error class (none for a success).",
	}, []string{"pipeline", "stage", "outcome", "class"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: nameRetries,
		Help: "Retries scheduled after a failed attempt, rate-limited waits included.",
	}, []string{"pipeline", "stage"})
	m.rateLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: nameRateLimited,
		Help: "Retries scheduled because the dependency asked to wait (rate limited).",
	}, []string{"pipeline", "stage"})
	m.deadLettered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: nameDeadLettered,
		Help: "Items moved to the dead-letter queue, by the stage that failed and the error class.",
	}, []string{"pipeline", "stage", "class"})
	m.redriven = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Name: nameRedriven,
		Help: "Dead or canceled items sent through again by a redrive.",
	})
	m.retainDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: nameRetainDeleted,
		Help: "Rows retention deleted: kind is succeeded (items past Retention), run_items (items of runs past RunRetention) or notifications.",
	}, []string{"kind"})
	for _, k := range retainKinds {
		m.retainDeleted.WithLabelValues(k)
	}
	m.retainBacklog = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: nameRetainBacklog,
		Help: "Succeeded items past retention that this process's last retention pass left to delete when its time was up (at most 1e6); 0 when it caught up. Growing: retention is behind the engine.",
	})
	m.retainNotes = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: nameRetainNotes,
		Help: "Delivered notifications past OutboxRetention that this process's last retention pass left to delete when its time was up (at most 1e6); 0 when it caught up. Growing: the outbox's retention is behind its deliveries.",
	})
	m.rescued = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: nameRescued,
		Help: "Items taken over after their worker's lease expired.",
	}, []string{"pipeline", "stage"})
	m.runsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: nameRunsFinished,
		Help: "Runs that reached a final status (completed, partial_success, failed, aborted).",
	}, []string{"pipeline", "status"})
	m.stageDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: nameStageDuration,
		Help:    "Duration of one attempt of a stage, whatever its outcome.",
		Buckets: DurationBuckets,
	}, []string{"pipeline", "stage"})
	m.retryDelay = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: nameRetryDelay,
		Help:    "Delay chosen before a scheduled retry (backoff or Retry-After).",
		Buckets: DurationBuckets,
	}, []string{"pipeline", "stage"})
	m.timeToSuccess = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: nameTimeToSuccess,
		Help:    "Time from an item's enqueue to its success (a redriven item keeps its first enqueue time).",
		Buckets: TimeToSuccessBuckets,
	}, []string{"pipeline"})
	m.breakerState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: ns, Name: nameBreakerState,
		Help: "State of a stage's circuit breaker as last reported to this process: 0 closed, 1 half-open, 2 open.",
	}, []string{"pipeline", "stage"})
	m.storeErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Name: nameStoreErrors,
		Help: "Store queries that failed while refreshing the store-derived gauges (the previous values are served).",
	})
	m.itemsDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, "", nameItems),
		"Items in the store by pipeline, current stage and state.",
		[]string{"pipeline", "stage", "state"}, nil)
	m.stuckDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, "", nameItemsStuck),
		"Items stuck: pending and due for longer than the stuck threshold, or running past their lease.",
		[]string{"pipeline"}, nil)
	m.oldestDueDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, "", nameOldestDueAge),
		"Seconds since the oldest due pending item became due (0 when none is due).",
		nil, nil)
	m.refreshDurationDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, "", nameRefreshDuration),
		"Duration of the last refresh of the store-derived gauges.",
		nil, nil)
	m.budgetRequestsDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, "", nameBudgetRequests),
		"Requests counted in a retry budget's current window.",
		[]string{"budget"}, nil)
	m.budgetRetriesDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, "", nameBudgetRetries),
		"Retries counted in a retry budget's current window.",
		[]string{"budget"}, nil)
	m.budgetRatioDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, "", nameBudgetRatio),
		"Retries over requests in a retry budget's current window (0 without requests).",
		[]string{"budget"}, nil)

	m.attemptChildren.make = func(k attemptKey) *attemptChildren {
		m.stageChildren.get(stageKey{k.pipeline, k.stage}) // exports the stage's zero series
		return &attemptChildren{
			attempts: m.attempts.WithLabelValues(k.pipeline, k.stage, k.outcome, k.class),
			duration: m.stageDuration.WithLabelValues(k.pipeline, k.stage),
		}
	}
	// The first event of a stage creates its counters at zero, the dead
	// letters of the usual classes and the runs of every final status
	// included, so that rate() and increase() see the first increment
	// (a series that starts at 1 looks like no increase).
	m.stageChildren.make = func(k stageKey) *stageChildren {
		for _, class := range zeroClasses {
			m.deadChildren.get(deadKey{k.pipeline, k.stage, class})
		}
		for _, st := range finalStatuses {
			m.runChildren.get(stageKey{k.pipeline, string(st)})
		}
		return &stageChildren{
			retries:     m.retries.WithLabelValues(k.pipeline, k.stage),
			rateLimited: m.rateLimited.WithLabelValues(k.pipeline, k.stage),
			rescued:     m.rescued.WithLabelValues(k.pipeline, k.stage),
			delay:       m.retryDelay.WithLabelValues(k.pipeline, k.stage),
		}
	}
	m.breakers.make = func(k stageKey) prometheus.Gauge {
		return m.breakerState.WithLabelValues(k.pipeline, k.stage)
	}
	m.successChildren.make = func(p string) prometheus.Observer {
		return m.timeToSuccess.WithLabelValues(p)
	}
	m.deadChildren.make = func(k deadKey) prometheus.Counter {
		return m.deadLettered.WithLabelValues(k.pipeline, k.stage, k.class)
	}
	m.runChildren.make = func(k stageKey) prometheus.Counter {
		return m.runsFinished.WithLabelValues(k.pipeline, k.stage)
	}
	return m
}

// Register registers m on r (a library user's own registry, or
// prometheus.DefaultRegisterer).
func (m *Metrics) Register(r prometheus.Registerer) error {
	if err := r.Register(m); err != nil {
		return fmt.Errorf("metrics: register: %w", err)
	}
	return nil
}

// TrackBudget exports the state of a retry budget under the label
// budget=name, read on scrape: redrive_retry_budget_requests,
// redrive_retry_budget_retries and redrive_retry_budget_retry_ratio.
// Tracking a name again replaces its budget; a nil budget stops tracking.
// Name budgets after the dependency they protect; keep the set small.
func (m *Metrics) TrackBudget(name string, b *retry.Budget) {
	m.budgetMu.Lock()
	defer m.budgetMu.Unlock()
	if b == nil {
		delete(m.budgets, name)
		return
	}
	m.budgets[name] = b
}

// Observe records an engine event. It is cheap and safe for concurrent
// use: put it in redrive.Config.Observers. Unknown events are ignored.
func (m *Metrics) Observe(ev redrive.Event) {
	switch e := ev.(type) {
	case redrive.AttemptFinished:
		class := e.Class
		if class == "" {
			class = ClassNone
		}
		c := m.attemptChildren.get(attemptKey{e.Pipeline, e.Stage, string(e.Outcome), class})
		c.attempts.Inc()
		c.duration.Observe(e.Duration.Seconds())
	case *redrive.AttemptFinished:
		m.Observe(*e)
	case redrive.RetryScheduled:
		c := m.stageChildren.get(stageKey{e.Pipeline, e.Stage})
		c.retries.Inc()
		if e.RateLimited {
			c.rateLimited.Inc()
		}
		c.delay.Observe(e.Delay.Seconds())
	case *redrive.RetryScheduled:
		m.Observe(*e)
	case redrive.DeadLettered:
		m.stageChildren.get(stageKey{e.Pipeline, e.Reason.Stage})
		m.deadChildren.get(deadKey{e.Pipeline, e.Reason.Stage, e.Reason.Class}).Inc()
	case *redrive.DeadLettered:
		m.Observe(*e)
	case redrive.ItemSucceeded:
		m.successChildren.get(e.Pipeline).Observe(e.TimeToSuccess().Seconds())
	case *redrive.ItemSucceeded:
		m.Observe(*e)
	case redrive.Rescued:
		m.stageChildren.get(stageKey{e.Pipeline, e.Stage}).rescued.Inc()
	case *redrive.Rescued:
		m.Observe(*e)
	case redrive.RunFinished:
		for _, st := range finalStatuses {
			m.runChildren.get(stageKey{e.Run.Pipeline, string(st)})
		}
		m.runChildren.get(stageKey{e.Run.Pipeline, string(e.Run.Status)}).Inc()
	case *redrive.RunFinished:
		m.Observe(*e)
	case redrive.BreakerChanged:
		m.breakers.get(stageKey{e.Pipeline, e.Stage}).Set(breakerValue(e.To))
	case *redrive.BreakerChanged:
		m.Observe(*e)
	case redrive.Redriven:
		if e.Count > 0 {
			m.redriven.Add(float64(e.Count))
		}
	case *redrive.Redriven:
		m.Observe(*e)
	case redrive.RetentionPassed:
		for i, n := range [...]int{e.Succeeded, e.RunItems, e.Notifications} {
			if n > 0 {
				m.retainDeleted.WithLabelValues(retainKinds[i]).Add(float64(n))
			}
		}
		m.retainBacklog.Set(float64(e.Backlog))
		m.retainNotes.Set(float64(e.NotificationBacklog))
	case *redrive.RetentionPassed:
		m.Observe(*e)
	}
}

// retainKinds are the values of the kind label of
// redrive_retention_deleted_total, in the order of RetentionPassed's
// Succeeded, RunItems and Notifications.
var retainKinds = [...]string{"succeeded", "run_items", "notifications"}

// breakerValue maps a breaker state to the value of redrive_breaker_state.
func breakerValue(s retry.BreakerState) float64 {
	switch s {
	case retry.BreakerOpen:
		return BreakerOpenValue
	case retry.BreakerHalfOpen:
		return BreakerHalfOpenValue
	default:
		return BreakerClosedValue
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.eventCollectors() {
		c.Describe(ch)
	}
	ch <- m.storeErrors.Desc()
	if m.store != nil {
		ch <- m.itemsDesc
		ch <- m.stuckDesc
		ch <- m.oldestDueDesc
		ch <- m.refreshDurationDesc
		ch <- m.thresholdDescs.stuckAfter
		ch <- m.thresholdDescs.deadLetters
	}
	ch <- m.budgetRequestsDesc
	ch <- m.budgetRetriesDesc
	ch <- m.budgetRatioDesc
	m.describeFlows(ch)
}

// Collect implements prometheus.Collector. The store-derived gauges come
// from the cache while it is younger than Options.GaugeCacheTTL; otherwise
// the store is queried. When a query fails the previous values are served
// and redrive_metrics_store_errors_total grows.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.eventCollectors() {
		c.Collect(ch)
	}
	if m.store != nil {
		for _, mt := range m.storeGauges() {
			ch <- mt
		}
	}
	ch <- m.storeErrors
	m.collectBudgets(ch)
	m.collectFlows(ch)
}

func (m *Metrics) eventCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.attempts, m.retries, m.rateLimited, m.deadLettered, m.redriven,
		m.retainDeleted, m.retainBacklog, m.retainNotes, m.rescued, m.runsFinished, m.stageDuration, m.retryDelay, m.breakerState,
		m.timeToSuccess,
	}
}

func (m *Metrics) collectBudgets(ch chan<- prometheus.Metric) {
	m.budgetMu.Lock()
	names := make([]string, 0, len(m.budgets))
	for n := range m.budgets {
		names = append(names, n)
	}
	budgets := make([]*retry.Budget, len(names))
	sort.Strings(names)
	for i, n := range names {
		budgets[i] = m.budgets[n]
	}
	m.budgetMu.Unlock()
	for i, n := range names {
		requests, retries := budgets[i].Stats()
		ratio := 0.0
		if requests > 0 {
			ratio = retries / requests
		}
		ch <- prometheus.MustNewConstMetric(m.budgetRequestsDesc, prometheus.GaugeValue, requests, n)
		ch <- prometheus.MustNewConstMetric(m.budgetRetriesDesc, prometheus.GaugeValue, retries, n)
		ch <- prometheus.MustNewConstMetric(m.budgetRatioDesc, prometheus.GaugeValue, ratio, n)
	}
}

// storeGauges returns the cached store-derived gauges, refreshing them
// when the cache expired. Concurrent scrapes wait for one refresh.
func (m *Metrics) storeGauges() []prometheus.Metric {
	m.refreshMu.Lock()
	defer m.refreshMu.Unlock()
	now := m.opts.Now()
	if m.cached != nil && m.opts.GaugeCacheTTL > 0 && now.Sub(m.cachedAt) < m.opts.GaugeCacheTTL {
		return m.cached
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.QueryTimeout)
	defer cancel()
	start := time.Now()
	ms, err := m.refresh(ctx, now)
	if err != nil {
		m.storeErrors.Inc()
		// Serve the previous values; retry at the next scrape.
		return m.cached
	}
	ms = append(ms, prometheus.MustNewConstMetric(m.refreshDurationDesc, prometheus.GaugeValue, time.Since(start).Seconds()))
	m.cached, m.cachedAt = ms, now
	return ms
}

// refresh queries the store for the gauges.
func (m *Metrics) refresh(ctx context.Context, now time.Time) ([]prometheus.Metric, error) {
	counts, err := m.store.StateCounts(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("metrics: state counts: %w", err)
	}
	var ms []prometheus.Metric
	type psKey struct{ pipeline, stage, state string }
	items := map[psKey]int{}
	stuck := map[string]int{}
	for _, c := range counts {
		items[psKey{c.Pipeline, c.Stage, string(c.State)}] += c.Count
		stuck[c.Pipeline] += 0 // every known pipeline gets a stuck series
	}
	for k, n := range items {
		ms = append(ms, prometheus.MustNewConstMetric(m.itemsDesc, prometheus.GaugeValue, float64(n), k.pipeline, k.stage, k.state))
	}

	oldest, err := m.store.OldestDue(ctx, now)
	if err != nil {
		return nil, fmt.Errorf("metrics: oldest due: %w", err)
	}
	age := 0.0
	if !oldest.IsZero() && oldest.Before(now) {
		age = now.Sub(oldest).Seconds()
	}
	ms = append(ms, prometheus.MustNewConstMetric(m.oldestDueDesc, prometheus.GaugeValue, age))

	custom := m.customThresholds()
	if err := m.countStuck(ctx, now, oldest, stuck, custom); err != nil {
		return nil, err
	}
	withItems := make([]string, 0, len(stuck))
	for p, n := range stuck {
		ms = append(ms, prometheus.MustNewConstMetric(m.stuckDesc, prometheus.GaugeValue, float64(n), p))
		withItems = append(withItems, p)
	}
	return append(ms, m.thresholdGauges(withItems, custom)...), nil
}

// stuckPage is how many items one stuck-scan query reads.
const stuckPage = 500

// countStuck adds to stuck, per pipeline, the running items whose lease
// expired and the pending items due before now less their pipeline's stuck
// threshold (custom, else StuckAfter). oldest is the oldest due time: when
// it is not older than the shortest threshold, no pending item is stuck and
// the scan is skipped.
func (m *Metrics) countStuck(ctx context.Context, now, oldest time.Time, stuck map[string]int, custom map[string]Thresholds) error {
	// Running items are few: bounded by the workers of all processes.
	var after int64
	for {
		its, err := m.store.ListItems(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateRunning}, AfterID: after, Limit: stuckPage})
		if err != nil {
			return fmt.Errorf("metrics: running items: %w", err)
		}
		for _, it := range its {
			if !it.LeaseExpiresAt.IsZero() && it.LeaseExpiresAt.Before(now) {
				stuck[it.Pipeline]++
			}
		}
		if len(its) < stuckPage {
			break
		}
		after = its[len(its)-1].ID
	}
	shortest := m.opts.StuckAfter
	for _, t := range custom {
		if t.StuckAfter > 0 {
			shortest = min(shortest, t.StuckAfter)
		}
	}
	cutoff := now.Add(-shortest)
	if oldest.IsZero() || !oldest.Before(cutoff) {
		return nil
	}
	cutoffs := map[string]time.Time{}
	cutoffOf := func(p string) time.Time {
		c, ok := cutoffs[p]
		if !ok {
			c = now.Add(-m.thresholds(p, custom).StuckAfter)
			cutoffs[p] = c
		}
		return c
	}
	// A pending item due before cutoff was last updated before it too
	// (NextAt is set at or after the update), so Until narrows the scan.
	after = 0
	for scanned := 0; scanned < m.opts.StuckScanLimit; {
		its, err := m.store.ListItems(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StatePending}, Until: cutoff, AfterID: after, Limit: stuckPage})
		if err != nil {
			return fmt.Errorf("metrics: overdue items: %w", err)
		}
		for _, it := range its {
			if it.NextAt.Before(cutoffOf(it.Pipeline)) {
				stuck[it.Pipeline]++
			}
		}
		scanned += len(its)
		if len(its) < stuckPage {
			break
		}
		after = its[len(its)-1].ID
	}
	return nil
}

// cache maps label values to metric children so that Observe does not
// hash label values and allocate a label slice on every event.
type cache[K comparable, V any] struct {
	mu   sync.RWMutex
	m    map[K]V
	make func(K) V
}

func (c *cache[K, V]) get(k K) V {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m[k]; ok {
		return v
	}
	if c.m == nil {
		c.m = map[K]V{}
	}
	v = c.make(k)
	c.m[k] = v
	return v
}
