package redrive

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned (wrapped) when a run or item does not exist.
var ErrNotFound = errors.New("redrive: not found")

// Store keeps items, runs and attempts. The engine decides what happens to
// an item; a store only claims, records and queries, in batches. Every Store
// passes the conformance suite in package storetest.
//
// Times passed in requests are the engine's clock; stores use them rather
// than their own so that tests can drive time.
type Store interface {
	// CreateRun creates a run of pipeline p, or, when opts.Name is set and
	// a run of that pipeline and name exists, returns that run with
	// created false.
	CreateRun(ctx context.Context, p string, opts RunOptions, now time.Time) (run Run, created bool, err error)
	// Enqueue adds items to a run at the given first stage. An item whose
	// key exists in the pipeline is not added again: its result carries the
	// existing item's ID and Existing true. Items with Invalid set are
	// stored dead with class invalid_input. The insert is atomic.
	Enqueue(ctx context.Context, req EnqueueRequest) ([]Enqueued, error)
	// RequestKey returns the binding of a client's idempotency key, or an
	// error wrapping ErrNotFound when the key is not bound.
	RequestKey(ctx context.Context, key string) (RequestKey, error)
	// BindRequestKey binds k.Key to k.Hash and k.RunID (at k.CreatedAt)
	// unless the key is bound already, and returns the binding the key
	// has after: k, or the earlier binding, unchanged. The run must exist;
	// the binding is deleted with it.
	BindRequestKey(ctx context.Context, k RequestKey) (RequestKey, error)

	// Claim leases up to req.Limit due pending items: state pending,
	// NextAt at or before req.Now, ordered by priority (higher first), then
	// order time (Item.OrderAt, by default the enqueue time), then ID, so
	// that due retries and new items compete by order time. Its cost does
	// not grow with the number of pending items that are not due yet.
	Claim(ctx context.Context, req ClaimRequest) ([]Lease, error)
	// ClaimExpired takes over up to req.Limit running items whose lease
	// expired before req.Now, with a new token, so a rescuer can record
	// the lost attempt.
	ClaimExpired(ctx context.Context, req ClaimRequest) ([]Lease, error)
	// Heartbeat extends the leases it still holds to until, and returns the
	// IDs of the items whose lease was lost (token no longer current).
	Heartbeat(ctx context.Context, leases []LeaseRef, until time.Time) (lost []int64, err error)
	// Complete applies completions in one transaction. Each one applies
	// only while its token is the item's current lease token and the item
	// is running; applied[i] reports whether completion i applied. An
	// applied completion also records its attempt. The caller may reuse
	// cs once Complete returns.
	Complete(ctx context.Context, cs []Completion) (applied []bool, err error)
	// Release returns leased items to pending, due at now, without
	// recording an attempt (a graceful stop).
	Release(ctx context.Context, leases []LeaseRef, now time.Time) error
	// MarkStarted records, for each lease still held, that its attempt
	// started at the mark's At (Item.AttemptStartedAt), and returns the IDs
	// of the items whose lease was lost. A claim clears the mark.
	MarkStarted(ctx context.Context, marks []StartMark) (lost []int64, err error)
	// ReleaseUnstarted returns items to pending, due at now, without
	// recording an attempt, and counts a lease loss on each
	// (Item.LeaseLosses): the rescuer's answer to an expired lease whose
	// attempt was never recorded as started. Leases no longer held are
	// ignored.
	ReleaseUnstarted(ctx context.Context, leases []LeaseRef, now time.Time) error

	// GetRun returns a run with its counts.
	GetRun(ctx context.Context, id int64) (Run, error)
	// ListRuns lists runs, newest first, with their counts.
	ListRuns(ctx context.Context, f RunFilter) ([]Run, error)
	// SetRunStatus sets the status of a run, its finish time and reason.
	// With status running it reopens a finished run (after a redrive).
	SetRunStatus(ctx context.Context, id int64, status RunStatus, reason string, at time.Time) error
	// FinishRun sets the final status (not running) of a run that is
	// running, its finish time and reason, and reports whether it did:
	// false when the run had already left running, because another
	// process finished or aborted it first.
	FinishRun(ctx context.Context, id int64, status RunStatus, reason string, at time.Time) (bool, error)
	// CancelPending cancels the pending items selected by f with reason r
	// and returns how many it canceled.
	CancelPending(ctx context.Context, f ItemFilter, r Reason) (int, error)
	// RetryNow makes the pending items selected by f that are waiting (due
	// after now, on a backoff or a rate limit) due at now, ready to be
	// claimed at once, and returns how many it changed. Attempt counters
	// are kept: it neither spends nor resets an attempt.
	RetryNow(ctx context.Context, f ItemFilter, now time.Time) (int, error)

	// GetItem returns one item.
	GetItem(ctx context.Context, id int64) (Item, error)
	// ListItems lists items selected by f, in ID order from f.AfterID.
	ListItems(ctx context.Context, f ItemFilter) ([]Item, error)
	// Attempts returns the attempts of an item in order.
	Attempts(ctx context.Context, itemID int64) ([]Attempt, error)
	// StateCounts counts items by pipeline, stage and state, optionally of
	// one run (runID 0 means all).
	StateCounts(ctx context.Context, runID int64) ([]StateCount, error)
	// RetryHistogram counts the finished items of a run by how many
	// retries (attempts beyond the first, over all stages, rate-limited
	// waits excluded) they needed. runID 0 means all runs.
	RetryHistogram(ctx context.Context, runID int64) ([]HistogramBucket, error)
	// TopErrors returns the most common failed-attempt errors per stage,
	// most frequent first.
	TopErrors(ctx context.Context, f ErrorFilter) ([]ErrorCount, error)
	// OldestDue returns the NextAt of the oldest due pending item, or the
	// zero time when none is due at now. A store may bound what it reads
	// of a very large set of ready items; its answer is then the oldest
	// among those it read, never older than the true one.
	OldestDue(ctx context.Context, now time.Time) (time.Time, error)

	// Redrive sends the dead or canceled items selected by f (f.States must
	// hold only those states; empty means dead) back to pending at the
	// stage they stopped at, with fresh attempt counters (Attempt,
	// RateLimitWaits and FailedAttempts back to 0); history is kept.
	// Item i is due at now + i*interval. Runs that had finished reopen.
	// Returns how many items it redrove.
	Redrive(ctx context.Context, f ItemFilter, now time.Time, interval time.Duration) (int, error)
	// RedriveFrom is Redrive that restarts each item selected by
	// req.Filter at the earlier stage req.Stage, with the input that stage
	// had as its payload: the previous stage's output, which stores keep
	// when an item moves on, or the item's original input for the first
	// stage. Every selected item must have reached the stage: otherwise
	// nothing changes and the error wraps ErrBadFilter. An item stopped at
	// req.Stage itself is redriven as Redrive would. With req.DryRun it
	// checks and counts, and changes nothing.
	RedriveFrom(ctx context.Context, req RedriveFromRequest) (int, error)
	// Purge deletes the dead items selected by f (and canceled ones when f
	// names that state) with their attempts. Their runs keep counting them,
	// as Counts.Purged.
	Purge(ctx context.Context, f ItemFilter) (int, error)
	// Count counts the items selected by f.
	Count(ctx context.Context, f ItemFilter) (int, error)
	// DeleteSucceeded deletes succeeded items last updated before t, with
	// their attempts, at most limit of them, and returns how many. Their
	// runs keep counting them as succeeded: a run's counts do not change.
	DeleteSucceeded(ctx context.Context, before time.Time, limit int) (int, error)
	// DeleteFinishedRuns deletes the runs that finished (any status but
	// running) before t: at most limit of their finished items (succeeded,
	// dead or canceled; 0 means no limit) with their attempts, then each
	// such run that has no items left. It returns how many items and runs
	// it deleted; fewer items than limit means none are left to delete.
	DeleteFinishedRuns(ctx context.Context, before time.Time, limit int) (items, runs int, err error)

	// UpsertWorker records that worker w is alive: it inserts or replaces
	// the row of w.Owner.
	UpsertWorker(ctx context.Context, w Worker) error
	// RemoveWorker deletes the row of owner; a missing row is not an error.
	RemoveWorker(ctx context.Context, owner string) error
	// ListWorkers lists the recorded workers by owner, stale ones included.
	ListWorkers(ctx context.Context) ([]Worker, error)
	// LeaseLoads counts the running items by lease owner, pipeline and
	// stage, ordered so, each with the smallest sample (at most; 0 means
	// none) of their IDs and how many of them have a lease expired at now.
	LeaseLoads(ctx context.Context, now time.Time, sample int) ([]LeaseLoad, error)
	// Timeline counts the attempts f selects by pipeline, stage and
	// bucket, ordered so; f must be valid (TimelineFilter.Validate). Its
	// cost grows with the attempts in f's time range, not with the store.
	Timeline(ctx context.Context, f TimelineFilter) ([]TimelineBucket, error)

	// Console holds the operators' console's queries.
	Console

	// Close releases the store's resources.
	Close() error
}

// Notifier is implemented by stores that can wake idle workers when work
// arrives from another process. The engine polls as well, so a missed
// notification only costs latency.
type Notifier interface {
	// Notifications returns a channel that receives a value when items may
	// have become due. It is closed when ctx ends.
	Notifications(ctx context.Context) <-chan struct{}
}

// EnqueueRequest adds items to a run.
type EnqueueRequest struct {
	RunID    int64
	Pipeline string
	Stage    string // the first stage's name
	Items    []NewItem
	Now      time.Time
}

// Enqueued is the result of enqueueing one item.
type Enqueued struct {
	ID       int64 `json:"id"`
	Existing bool  `json:"existing"`
}

// RedriveFromRequest asks a store to redrive items from an earlier stage.
type RedriveFromRequest struct {
	// Filter selects the items, as for Redrive.
	Filter ItemFilter
	// Stage is the stage to restart them at. Required.
	Stage string
	// Now is when the first item is due; item i is due at
	// Now + i*Interval.
	Now      time.Time
	Interval time.Duration
	// DryRun checks and counts without changing anything. Default false.
	DryRun bool
}

// StageKey names a stage of a pipeline.
type StageKey struct {
	Pipeline string
	Stage    string
}

// ClaimRequest asks for leases.
type ClaimRequest struct {
	// Owner identifies the worker process, for operators.
	Owner string
	// Pipelines limits claims to these pipelines; empty means none.
	Pipelines []string
	// Only, when not empty, limits claims to these stages.
	Only []StageKey
	// Exclude skips these stages (open breakers, full stages).
	Exclude []StageKey
	Limit   int
	// LeaseUntil is when the new leases expire.
	LeaseUntil time.Time
	Now        time.Time
	// StartedAt, when not zero, records the claimed items' attempts as
	// started at that time (Item.AttemptStartedAt), in the claim itself,
	// as MarkStarted would: for a claimer that starts every item it
	// claims at once. Default zero: the claim clears the mark. Claim
	// only; ClaimExpired ignores it.
	StartedAt time.Time
}

// Lease is a claimed item and its fencing token.
type Lease struct {
	Item  Item
	Token int64
}

// Ref returns the lease's reference.
func (l Lease) Ref() LeaseRef { return LeaseRef{ItemID: l.Item.ID, Token: l.Token} }

// StartMark records when the attempt of a lease started.
type StartMark struct {
	Lease LeaseRef
	At    time.Time
}

// LeaseRef identifies a lease.
type LeaseRef struct {
	ItemID int64
	Token  int64
}

// Completion is the engine's decision about a leased item.
type Completion struct {
	ItemID int64
	Token  int64
	// State is the item's next state: pending (next stage or retry),
	// succeeded, dead or canceled.
	State      State
	StageIndex int
	Stage      string
	// Attempt is the item's attempt counter at its (possibly new) stage.
	Attempt        int
	RateLimitWaits int
	// FailedAttempts is the item's count of failed attempts over all its
	// stages (Item.FailedAttempts).
	FailedAttempts int
	// NextAt is when a pending item is due.
	NextAt time.Time
	// Payload replaces the item's payload when not nil.
	Payload []byte
	// Reason is set for dead and canceled.
	Reason *Reason
	// Record is the attempt to record.
	Record Attempt
	Now    time.Time
}

// RunFilter selects runs.
type RunFilter struct {
	Pipeline string
	Status   RunStatus
	// BeforeID pages backwards: only runs with a smaller ID. 0 means none.
	BeforeID int64
	// Limit caps the result. 0 means 100.
	Limit int
}

// ItemFilter selects items. Zero fields select everything.
type ItemFilter struct {
	RunID    int64
	Pipeline string
	Stage    string
	States   []State
	// Key selects the item submitted with this key (unique per pipeline).
	// Default "": any key.
	Key string
	// DueAfter, when not zero, selects only items due after it: pending
	// items waiting on a backoff or a rate limit at that time. Default:
	// any due time.
	DueAfter time.Time
	// Class matches the reason's class of dead and canceled items.
	Class string
	// ErrorContains matches a substring of the reason's error, ignoring
	// case (SQLite folds the case of ASCII letters only).
	ErrorContains string
	// Fingerprint matches the fingerprint of the reason's error (see
	// Fingerprint and ErrorGroup): the items of one error group. Default
	// "": any.
	Fingerprint string
	// Since and Until bound the time the item reached its state
	// (the reason's time for dead and canceled items, else UpdatedAt).
	Since, Until time.Time
	// AfterID pages forwards: only items with a larger ID.
	AfterID int64
	// IDs, when not empty, selects only the items with these IDs (an
	// operator canceling one item). Default: none, any ID.
	IDs []int64
	// ActionID, when not 0, selects only the items that the audit log's
	// action ActionID marked (see ActionMarks): the items a redrive,
	// cancel or retry now changed, whatever state they are in since.
	// Default 0: any item.
	ActionID int64
	// Limit caps the result. 0 means no limit (ListItems: 100).
	Limit int
}

// Validate reports a filter that cannot be right.
func (f ItemFilter) Validate() error {
	for _, s := range f.States {
		if !s.Valid() {
			return errors.New("redrive: unknown state " + string(s))
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return errors.New("redrive: filter until is before since")
	}
	if f.Limit < 0 {
		return errors.New("redrive: filter limit must not be negative")
	}
	for _, id := range f.IDs {
		if id <= 0 {
			return errors.New("redrive: filter IDs must be positive")
		}
	}
	if f.ActionID < 0 {
		return errors.New("redrive: filter action ID must be positive")
	}
	return nil
}

// StateCount is the number of items of a pipeline stage in a state.
type StateCount struct {
	Pipeline string `json:"pipeline"`
	Stage    string `json:"stage"`
	State    State  `json:"state"`
	Count    int    `json:"count"`
}

// HistogramBucket is how many finished items needed Retries retries.
type HistogramBucket struct {
	Retries int `json:"retries"`
	Items   int `json:"items"`
}

// ErrorFilter selects failed attempts for TopErrors.
type ErrorFilter struct {
	RunID    int64
	Pipeline string
	// Limit caps the rows per stage. 0 means 5.
	Limit int
}

// ErrorCount is how often an error message occurred at a stage.
type ErrorCount struct {
	Pipeline string `json:"pipeline"`
	Stage    string `json:"stage"`
	Class    string `json:"class"`
	Error    string `json:"error"`
	Count    int    `json:"count"`
}

// Migration is one versioned schema migration of a store.
type Migration struct {
	// Version orders migrations; it is the number the file name starts with.
	Version int `json:"version"`
	// Name is the rest of the file name, without the extension.
	Name string `json:"name"`
	// Applied reports whether the migration has been applied.
	Applied bool `json:"applied"`
	// AppliedAt is when it was applied, or the zero time.
	AppliedAt time.Time `json:"applied_at,omitzero"`
}

// Migrator is implemented by stores whose schema is migrated (both the
// SQLite and the PostgreSQL store).
type Migrator interface {
	// MigrationStatus lists the migrations of the build in version order
	// and whether each is applied.
	MigrationStatus(ctx context.Context) ([]Migration, error)
}
