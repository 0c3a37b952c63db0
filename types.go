package redrive

import (
	"errors"
	"time"
)

// State is where an item is in its life.
type State string

// The states of an item. Pending items wait for their next attempt time;
// running items are leased by a worker; succeeded, dead and canceled are
// final until a redrive sends dead or canceled items through again.
const (
	StatePending   State = "pending"
	StateRunning   State = "running"
	StateSucceeded State = "succeeded"
	StateDead      State = "dead"
	StateCanceled  State = "canceled"
)

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool {
	switch s {
	case StatePending, StateRunning, StateSucceeded, StateDead, StateCanceled:
		return true
	}
	return false
}

// RunStatus is the status of a run.
type RunStatus string

// The statuses of a run. A run is running until every item has finished;
// it then ends completed, partial_success or failed according to its success
// rate, or aborted when its failure budget was exceeded.
const (
	RunRunning        RunStatus = "running"
	RunCompleted      RunStatus = "completed"
	RunPartialSuccess RunStatus = "partial_success"
	RunFailed         RunStatus = "failed"
	RunAborted        RunStatus = "aborted"
)

// Outcome is what one attempt came to.
type Outcome string

// The outcomes of an attempt.
const (
	// OutcomeSucceeded: the stage returned its output.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeRetry: the attempt failed and another one is scheduled.
	OutcomeRetry Outcome = "retry"
	// OutcomeRateLimited: the dependency asked to wait; the wait does not
	// consume an attempt.
	OutcomeRateLimited Outcome = "rate_limited"
	// OutcomeDead: the attempt failed finally, or was the last one allowed.
	OutcomeDead Outcome = "dead"
	// OutcomeLost: the worker running the attempt vanished (its lease
	// expired); the rescuer recorded it and scheduled a retry or dead-lettered.
	OutcomeLost Outcome = "lost"
)

// Class names used in reasons beside the retry package's classes
// ("final", "retryable", "rate_limited").
const (
	// ClassCanceled marks items canceled by an abort or an operator.
	ClassCanceled = "canceled"
	// ClassInvalidInput marks items whose input could not be read at all.
	ClassInvalidInput = "invalid_input"
	// ClassLost marks attempts whose worker vanished.
	ClassLost = "lost"
)

// Reason says why an item is dead or canceled.
type Reason struct {
	Stage    string    `json:"stage"`
	Class    string    `json:"class"`
	Error    string    `json:"error"`
	Attempts int       `json:"attempts"`
	At       time.Time `json:"at"`
}

// Item is one unit of work moving through the stages of a pipeline.
type Item struct {
	ID         int64  `json:"id"`
	RunID      int64  `json:"run_id"`
	Pipeline   string `json:"pipeline"`
	Key        string `json:"key,omitempty"`
	Stage      string `json:"stage"`
	StageIndex int    `json:"stage_index"`
	State      State  `json:"state"`
	Priority   int    `json:"priority,omitempty"`
	// Attempt counts the attempts made at the current stage.
	Attempt int `json:"attempt"`
	// RateLimitWaits counts the rate-limited waits at the current stage.
	RateLimitWaits int `json:"rate_limit_waits,omitempty"`
	// FailedAttempts counts the item's failed attempts over all its stages
	// that used up an attempt of their stage: rate-limited waits that do
	// not (see Stage.CountRateLimitWaits) and failed probes of a half-open
	// breaker are not counted. The item's attempt of the whole pipeline,
	// as ADR-0010 counts a job's, is FailedAttempts + 1; Pipeline.MaxAttempts
	// caps it. A redrive sets it back to 0.
	FailedAttempts int `json:"failed_attempts,omitempty"`
	// Payload is the input of the current stage: the original input for
	// the first stage, the previous stage's output after that, and the last
	// stage's output once the item succeeded.
	Payload []byte `json:"payload,omitempty"`
	// Input is the item's original input.
	Input      []byte    `json:"input,omitempty"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	// OrderAt is the item's order time: claims take due items of equal
	// priority oldest order time first. It is NewItem.OrderAt, or the
	// enqueue time when that was zero.
	OrderAt time.Time `json:"order_at"`
	// NextAt is when a pending item is due.
	NextAt         time.Time `json:"next_at"`
	LeaseOwner     string    `json:"lease_owner,omitempty"`
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitzero"`
	// AttemptStartedAt is, for a running item, when its current lease's
	// attempt was recorded as started; zero while no start is recorded (a
	// leased item whose handler has not started, or started moments ago).
	// The rescuer charges a lost attempt only to a lease with a start.
	AttemptStartedAt time.Time `json:"attempt_started_at,omitzero"`
	// LeaseLosses counts the leases of the item that expired with no
	// attempt recorded as started: their process died before it ran them,
	// or moments after it started them. Such leases return the item to
	// pending without an attempt charged; an item that has lost one is
	// recorded as started before its handler runs again, so that a handler
	// that kills its process is charged every later attempt.
	LeaseLosses int `json:"lease_losses,omitempty"`
	// UpdatedAt is when the item last changed state or lease: for a
	// running item, when its current lease began (its claim or a
	// rescuer's take-over; heartbeats and start marks leave it).
	UpdatedAt time.Time `json:"updated_at"`
	// TraceParent and TraceState are the W3C Trace Context the item was
	// submitted with (NewItem.TraceParent): its attempts' spans are
	// children of that span. Empty when it was submitted without one.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// Reason is set for dead and canceled items.
	Reason *Reason `json:"reason,omitempty"`
}

// Attempt is one execution of one stage for one item.
type Attempt struct {
	ID         int64     `json:"id"`
	ItemID     int64     `json:"item_id"`
	RunID      int64     `json:"run_id"`
	Pipeline   string    `json:"pipeline"`
	Stage      string    `json:"stage"`
	StageIndex int       `json:"stage_index"`
	Number     int       `json:"number"`
	Outcome    Outcome   `json:"outcome"`
	Class      string    `json:"class,omitempty"`
	Error      string    `json:"error,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Delay is the wait chosen after this attempt before the next one.
	Delay time.Duration `json:"delay"`
	// ConfigHash is the hash of the stage's configuration that made the
	// attempt (Stage.ConfigHash), so that a change of policy shows in the
	// history. Empty for attempts recorded before hashes were, or of a
	// stage the recording process does not know.
	ConfigHash string `json:"config_hash,omitempty"`
}

// Counts are the items of a run by state. Total always equals the sum of
// the others, purged items included: a purge removes items, not the fact
// that the run had them, so a run's total and success rate do not change
// when its dead letters are purged.
type Counts struct {
	Total     int `json:"total"`
	Pending   int `json:"pending"`
	Running   int `json:"running"`
	Succeeded int `json:"succeeded"`
	Dead      int `json:"dead"`
	Canceled  int `json:"canceled"`
	// Purged counts the dead and canceled items deleted by Purge.
	// Succeeded items deleted by retention stay in Succeeded.
	Purged int `json:"purged"`
}

// Finished is the number of items that reached a final state (purged
// items had).
func (c Counts) Finished() int { return c.Succeeded + c.Dead + c.Canceled + c.Purged }

// AddsUp reports whether Total is the sum of the counts by state.
func (c Counts) AddsUp() bool {
	return c.Total == c.Pending+c.Running+c.Succeeded+c.Dead+c.Canceled+c.Purged
}

// Add adds n items in state s.
func (c *Counts) Add(s State, n int) {
	switch s {
	case StatePending:
		c.Pending += n
	case StateRunning:
		c.Running += n
	case StateSucceeded:
		c.Succeeded += n
	case StateDead:
		c.Dead += n
	case StateCanceled:
		c.Canceled += n
	}
	c.Total += n
}

// RunOptions configure a run. Zero values take the stated defaults.
type RunOptions struct {
	// Name names the run. Starting a run whose pipeline and name exist
	// resumes that run: items whose keys it already holds are not added
	// again. Default: none, every start makes a new run.
	Name string `json:"name,omitempty"`
	// SuccessThreshold is the success rate at or above which a finished
	// run is completed. Default 0.95.
	SuccessThreshold float64 `json:"success_threshold,omitempty"`
	// PartialThreshold is the success rate at or above which a finished
	// run is partial_success rather than failed. Default 0.50.
	PartialThreshold float64 `json:"partial_threshold,omitempty"`
	// FailureBudget is the dead rate above which the run aborts and its
	// pending items are canceled: as soon as the run's dead items are more
	// than FailureBudget of its total, or, once MinItems have finished, as
	// soon as the finished items show with 99.9 % confidence that the dead
	// rate is above it (see BudgetExceeded). Default 0: no budget.
	FailureBudget float64 `json:"failure_budget,omitempty"`
	// MinItems is how many items must have finished before the failure
	// budget is judged on the finished items' dead rate. Default: 50, or
	// the run's total when smaller.
	MinItems int `json:"min_items,omitempty"`
	// Source says where the run's items came from (the runner records its
	// input file's path), for operators. Default: none.
	Source string `json:"source,omitempty"`
	// SourceHash identifies the content of the source (the runner records
	// "sha256:<hex>" of its input file). Resuming a named run with a
	// different SourceHash fails with ErrRunMismatch, so that different
	// input is never merged into a run. Default: none, not checked.
	SourceHash string `json:"source_hash,omitempty"`
}

// Defaults of RunOptions.
const (
	DefaultSuccessThreshold = 0.95
	DefaultPartialThreshold = 0.50
	DefaultMinItems         = 50
)

// withDefaults returns o with zero fields set to their defaults.
func (o RunOptions) withDefaults() RunOptions {
	if o.SuccessThreshold == 0 {
		o.SuccessThreshold = DefaultSuccessThreshold
	}
	if o.PartialThreshold == 0 {
		o.PartialThreshold = DefaultPartialThreshold
	}
	if o.MinItems == 0 {
		o.MinItems = DefaultMinItems
	}
	return o
}

// Validate reports options outside their ranges.
func (o RunOptions) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"SuccessThreshold", o.SuccessThreshold}, {"PartialThreshold", o.PartialThreshold}, {"FailureBudget", o.FailureBudget}} {
		if f.v < 0 || f.v > 1 {
			return errors.New("redrive: RunOptions." + f.name + " must be between 0 and 1")
		}
	}
	if d := o.withDefaults(); d.PartialThreshold > d.SuccessThreshold {
		return errors.New("redrive: RunOptions.PartialThreshold must not exceed SuccessThreshold")
	}
	if o.MinItems < 0 {
		return errors.New("redrive: RunOptions.MinItems must not be negative")
	}
	return nil
}

// Run is a batch of items submitted together.
type Run struct {
	ID         int64      `json:"id"`
	Pipeline   string     `json:"pipeline"`
	Name       string     `json:"name,omitempty"`
	Status     RunStatus  `json:"status"`
	Options    RunOptions `json:"options"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt time.Time  `json:"finished_at,omitzero"`
	// Reason says why an aborted run was aborted.
	Reason string `json:"reason,omitempty"`
	Counts Counts `json:"counts"`
}

// SuccessRate is succeeded over total, or 0 for an empty run.
func (r Run) SuccessRate() float64 {
	if r.Counts.Total == 0 {
		return 0
	}
	return float64(r.Counts.Succeeded) / float64(r.Counts.Total)
}

// NewItem is an item to enqueue.
type NewItem struct {
	// Key is an idempotency key, unique within a pipeline: enqueueing an
	// item whose key exists returns the existing item. Default: none.
	Key string
	// Payload is the input of the first stage.
	Payload []byte
	// Priority orders due items: higher first. Default 0.
	Priority int
	// OrderAt orders due items of equal priority: oldest first, so that
	// an item's retries compete with newer items by this time. Set it to
	// the time the work was asked for (a submission date) when that is
	// older than the enqueue. Default: the enqueue time.
	OrderAt time.Time
	// Invalid, when set, records the item as dead at once with class
	// invalid_input and this message: input that could not be read is
	// accounted for rather than dropped.
	Invalid string
	// Callback, when set, is an absolute http or https URL told of the
	// item's end through the outbox, signed like a webhook: item.dead
	// always, item.succeeded and item.canceled when the pipeline's webhook
	// announces them (docs/webhooks.md). The store keeps it as given; the
	// caller validates it (the HTTP API does). Default: none.
	Callback string
	// TraceParent is a W3C traceparent header value ("00-<trace ID>-<span
	// ID>-<flags>") that the item's attempt spans become children of,
	// kept with the item across processes and restarts (docs/tracing.md).
	// Default: the span of the context passed to Submit, StartRun or
	// AddItems, if any; else none, and each attempt's span starts a trace.
	TraceParent string
	// TraceState is the W3C tracestate header value that goes with
	// TraceParent. Default: none.
	TraceState string
}
