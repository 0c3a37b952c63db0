package redrive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Config configures a Client. Zero values take the stated defaults.
type Config struct {
	// Workers is how many attempts run at once. Default 16.
	Workers int
	// ClaimBatch is the most items claimed in one store call.
	// Default: Workers, at least 32 and at most 512.
	ClaimBatch int
	// PrefetchWindow is how much work a process leases ahead of its
	// free workers, so that a worker that finishes finds its next item
	// without waiting for a claim: the items its workers start in this
	// long at their recent rate, rounded up, and at most 2 × ClaimBatch.
	// The rate follows a rise within about a tenth of a second and a fall
	// over about a second, and from rest it takes the rate of the first
	// starts after the free workers' at once, so a burst of work after a
	// quiet spell is claimed in full batches within a few claims. Beyond
	// that, items stay in the queue, where other processes and newly due
	// retries compete for them in claim order. When a process dies, the
	// leases whose handler had not started go back to pending without an
	// attempt charged. Default 100 ms; negative leases only for free
	// workers.
	PrefetchWindow time.Duration
	// Writers is how many batches of completions are written at once.
	// A server database (PostgreSQL) takes several concurrent transactions
	// well; SQLite serialises them anyway. Default 2.
	Writers int
	// PollInterval is how often an idle client looks for due items when no
	// notification wakes it. Default 100 ms.
	PollInterval time.Duration
	// LeaseDuration is how long a claim lasts without a heartbeat; a
	// worker that vanished loses its items after this long. Default 30 s.
	LeaseDuration time.Duration
	// HeartbeatInterval is how often leases are extended. Default
	// LeaseDuration / 3.
	HeartbeatInterval time.Duration
	// RescueInterval is how often expired leases are looked for.
	// Default 5 s.
	RescueInterval time.Duration
	// RunCheckInterval is how often running runs are checked for their
	// end and their failure budget (a count of each running run's items,
	// so not too often). Default 1 s.
	RunCheckInterval time.Duration
	// Retention is how long succeeded items and their attempts are kept
	// after they succeeded. Default 7 days (DefaultRetention); negative
	// keeps them. Dead and canceled items stay until purged or until their
	// run is deleted (RunRetention).
	Retention time.Duration
	// RunRetention is how long a run is kept after it finished (completed,
	// partial_success, failed or aborted); then its finished items, dead
	// and canceled ones too, their attempts and the run itself are
	// deleted. A redrive reopens a run and so keeps it. Default 30 days
	// (DefaultRunRetention); negative keeps runs.
	RunRetention time.Duration
	// OutboxRetention is how long delivered notifications (webhooks and
	// callbacks) are kept after their delivery, for operators to look
	// up; pending and dead ones stay until delivered or redriven. Applies
	// to stores that keep an outbox. Default 7 days
	// (DefaultOutboxRetention); negative keeps them.
	OutboxRetention time.Duration
	// RetentionInterval is how often a started client deletes what the
	// retention settings let go. Default 1 minute.
	RetentionInterval time.Duration
	// RetentionBatch is how many items (or delivered notifications) the
	// first delete statement of a retention pass removes: each batch is its
	// own transaction, which suits PostgreSQL's vacuum and keeps SQLite's
	// write lock short. While batches come back full within a quarter of
	// a second, a pass doubles its batch up to 20,000 items (or
	// RetentionBatch when larger), so that it keeps pace with a busy
	// engine, and halves it again, not below RetentionBatch, after a batch
	// that took longer than half a second. Default 1,000
	// (DefaultRetentionBatch).
	RetentionBatch int
	// Owner names this client in leases. Default: host name, process ID
	// and a random suffix.
	Owner string
	// Logger receives the engine's log lines. Default: none.
	Logger *slog.Logger
	// Observers receive every event (see Event). Default: none.
	Observers []func(Event)
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// TracerProvider makes a span of every attempt (docs/tracing.md): a
	// child of the trace context its item was submitted with, carrying the
	// pipeline, stage, attempt number, item, run, worker and, for a failed
	// attempt, its class and an error status; the handler's context holds
	// it. Pass the OpenTelemetry SDK's provider (go.opentelemetry.io/otel/sdk/trace)
	// to export them. Default nil: no tracing, as with a no-op provider
	// (go.opentelemetry.io/otel/trace/noop), at no cost per attempt: the
	// engine then has no tracer and starts no span.
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.ClaimBatch <= 0 {
		c.ClaimBatch = min(max(c.Workers, 32), 512)
	}
	if c.Writers <= 0 {
		c.Writers = 2
	}
	if c.PrefetchWindow == 0 {
		c.PrefetchWindow = DefaultPrefetchWindow
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 100 * time.Millisecond
	}
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = 30 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = c.LeaseDuration / 3
	}
	if c.RescueInterval <= 0 {
		c.RescueInterval = 5 * time.Second
	}
	if c.RunCheckInterval <= 0 {
		c.RunCheckInterval = time.Second
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.RunRetention == 0 {
		c.RunRetention = DefaultRunRetention
	}
	if c.OutboxRetention == 0 {
		c.OutboxRetention = DefaultOutboxRetention
	}
	if c.RetentionInterval <= 0 {
		c.RetentionInterval = DefaultRetentionInterval
	}
	if c.RetentionBatch <= 0 {
		c.RetentionBatch = DefaultRetentionBatch
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = host + ":" + strconv.Itoa(os.Getpid()) + ":" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// DefaultPrefetchWindow is Config.PrefetchWindow when it is 0.
const DefaultPrefetchWindow = 100 * time.Millisecond

// Errors of the Client.
var (
	// ErrUnknownPipeline is returned for a pipeline that was not registered.
	ErrUnknownPipeline = errors.New("redrive: unknown pipeline")
	// ErrStarted is returned by Register and Start once the client runs.
	ErrStarted = errors.New("redrive: client already started")
	// ErrNotStarted is returned by Stop before Start.
	ErrNotStarted = errors.New("redrive: client not started")
	// ErrRunMismatch is returned by StartRun when the named run it would
	// resume was made from another source (RunOptions.SourceHash).
	ErrRunMismatch = errors.New("redrive: the named run was made from other input")
)

// Client submits runs and, once started, works the items of its registered
// pipelines. Its methods are safe for concurrent use.
type Client struct {
	store Store
	cfg   Config

	mu        sync.Mutex
	pipelines map[string]*Pipeline
	eng       *engine
}

// NewClient returns a client over store.
func NewClient(store Store, cfg Config) *Client {
	return &Client{store: store, cfg: cfg.withDefaults(), pipelines: map[string]*Pipeline{}}
}

// Store returns the client's store.
func (c *Client) Store() Store { return c.store }

// Register adds a pipeline. Pipelines are registered before Start.
func (c *Client) Register(p Pipeline) error {
	if err := p.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.eng != nil {
		return ErrStarted
	}
	if _, ok := c.pipelines[p.Name]; ok {
		return fmt.Errorf("%w: pipeline %q registered twice", ErrInvalidPipeline, p.Name)
	}
	p.Stages = append([]Stage(nil), p.Stages...)
	p.hashes = make([]string, len(p.Stages))
	for i := range p.Stages {
		p.hashes[i] = p.Stages[i].ConfigHash()
	}
	c.pipelines[p.Name] = &p
	return nil
}

func (c *Client) pipeline(name string) (*Pipeline, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pipelines[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownPipeline, name)
	}
	return p, nil
}

// StartRun creates a run of a registered pipeline and enqueues its items.
// With opts.Name set, starting a run whose name exists resumes it: items
// whose keys it holds are not added again, so a rerun redoes nothing. When
// opts.SourceHash is set and differs from the existing run's, nothing is
// added and the error wraps ErrRunMismatch (the run is returned too).
func (c *Client) StartRun(ctx context.Context, pipeline string, items []NewItem, opts RunOptions) (Run, error) {
	if _, err := c.pipeline(pipeline); err != nil {
		return Run{}, err
	}
	if err := opts.Validate(); err != nil {
		return Run{}, err
	}
	run, created, err := c.store.CreateRun(ctx, pipeline, opts, c.cfg.Now())
	if err != nil {
		return Run{}, fmt.Errorf("redrive: start run: %w", err)
	}
	if !created && opts.SourceHash != "" && run.Options.SourceHash != opts.SourceHash {
		was := run.Options.Source
		if was == "" {
			was = "unrecorded input"
		}
		return run, fmt.Errorf("%w: run %d %q holds items of %s (%s), not of %s (%s)", ErrRunMismatch,
			run.ID, run.Name, was, orNone(run.Options.SourceHash), opts.Source, opts.SourceHash)
	}
	if len(items) == 0 && run.Counts.Total == 0 {
		// An empty run has nothing to wait for.
		if err := c.store.SetRunStatus(ctx, run.ID, RunCompleted, "", c.cfg.Now()); err != nil {
			return Run{}, fmt.Errorf("redrive: start run: %w", err)
		}
	}
	if _, err := c.AddItems(ctx, run.ID, items); err != nil {
		return Run{}, err
	}
	return c.store.GetRun(ctx, run.ID)
}

// AddItems enqueues items into an existing run at its pipeline's first
// stage, in one transaction. A finished run reopens. When ctx carries a span
// (OpenTelemetry), items without a TraceParent of their own are submitted
// with its trace context.
func (c *Client) AddItems(ctx context.Context, runID int64, items []NewItem) ([]Enqueued, error) {
	run, err := c.store.GetRun(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("redrive: add items: %w", err)
	}
	p, err := c.pipeline(run.Pipeline)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, nil
	}
	items = withTraceContext(ctx, items)
	out, err := c.store.Enqueue(ctx, EnqueueRequest{RunID: runID, Pipeline: p.Name, Stage: p.Stages[0].Name, Items: items, Now: c.cfg.Now()})
	if err != nil {
		return nil, fmt.Errorf("redrive: enqueue: %w", err)
	}
	// A run that finished (perhaps while these items were being written)
	// reopens when it received new work. Input that could not be read is
	// dead from the start, and reported like any dead letter.
	added := false
	now := c.cfg.Now()
	for i, e := range out {
		added = added || !e.Existing
		if !e.Existing && items[i].Invalid != "" {
			c.emit(DeadLettered{Pipeline: p.Name, RunID: runID, ItemID: e.ID,
				Reason: Reason{Stage: p.Stages[0].Name, Class: ClassInvalidInput, Error: items[i].Invalid, At: now}})
		}
	}
	if run, err = c.store.GetRun(ctx, runID); err == nil && run.Status != RunRunning && run.Status != RunAborted && added {
		err = c.store.SetRunStatus(ctx, runID, RunRunning, "", c.cfg.Now())
	}
	if err != nil {
		return out, fmt.Errorf("redrive: reopen run %d: %w", runID, err)
	}
	c.wake()
	return out, nil
}

func orNone(s string) string {
	if s == "" {
		return "no content hash"
	}
	return s
}

func (c *Client) wake() {
	c.mu.Lock()
	e := c.eng
	c.mu.Unlock()
	if e != nil {
		e.wake()
	}
}

func (c *Client) emit(ev Event) {
	for _, o := range c.cfg.Observers {
		o(ev)
	}
}
