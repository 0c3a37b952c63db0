package redrive

import (
	"time"

	"github.com/redrive/redrive/retry"
)

// Event is something the engine did. Observers (Config.Observers) receive
// events synchronously from the engine's goroutines, so they must be fast
// and safe for concurrent use: the metrics package and the slog logger are.
//
// The concrete types are AttemptFinished, RetryScheduled, DeadLettered,
// ItemSucceeded, Rescued, RunFinished, BreakerChanged, Redriven and
// RetentionPassed.
type Event interface{ isEvent() }

// AttemptFinished is sent for every recorded attempt.
type AttemptFinished struct {
	Pipeline string
	Stage    string
	RunID    int64
	ItemID   int64
	Attempt  int
	Outcome  Outcome
	// Class is empty for a success.
	Class    string
	Error    string
	Duration time.Duration
	// Delay is the wait chosen before the next attempt, if one was scheduled.
	Delay time.Duration
}

// RetryScheduled is sent when a failed attempt schedules another one.
type RetryScheduled struct {
	Pipeline    string
	Stage       string
	RunID       int64
	ItemID      int64
	Attempt     int
	Delay       time.Duration
	RateLimited bool
}

// DeadLettered is sent when an item becomes dead.
type DeadLettered struct {
	Pipeline string
	RunID    int64
	ItemID   int64
	Reason   Reason
}

// ItemSucceeded is sent when an item's last stage succeeded, after its
// AttemptFinished. EnqueuedAt is when the item was enqueued (a redriven item
// keeps its first enqueue time), At when the last attempt finished, both by
// the clock of the engine that recorded them; At minus EnqueuedAt is the
// item's time to success, which ADR-0010 asks to monitor.
type ItemSucceeded struct {
	Pipeline   string
	RunID      int64
	ItemID     int64
	EnqueuedAt time.Time
	At         time.Time
}

// TimeToSuccess is how long the item took from enqueue to success, or 0
// when the clocks disagree.
func (e ItemSucceeded) TimeToSuccess() time.Duration { return max(e.At.Sub(e.EnqueuedAt), 0) }

// Rescued is sent when the rescuer takes over an item whose lease expired.
type Rescued struct {
	Pipeline string
	Stage    string
	RunID    int64
	ItemID   int64
	// Started reports that the lease's attempt had been recorded as
	// started: the rescuer charged it as a lost attempt. Otherwise the item
	// went back to pending without an attempt (Item.LeaseLosses).
	Started bool
}

// RunFinished is sent when a run reaches a final status.
type RunFinished struct {
	Run Run
}

// BreakerChanged is sent when a stage's circuit breaker changes state.
type BreakerChanged struct {
	Pipeline string
	Stage    string
	From, To retry.BreakerState
	At       time.Time
}

// Redriven is sent after a redrive.
type Redriven struct {
	Filter ItemFilter
	Count  int
}

// RetentionPassed is sent after each retention pass (see
// Config.Retention): what it deleted and what it left behind.
type RetentionPassed struct {
	// Succeeded is how many succeeded items past Retention it deleted.
	Succeeded int
	// RunItems is how many items of runs past RunRetention it deleted.
	RunItems int
	// Runs is how many runs past RunRetention it deleted.
	Runs int
	// Notifications is how many delivered notifications it deleted.
	Notifications int
	// Backlog is how many succeeded items past Retention the pass left
	// when it ran out of time with batches still coming back full (at most
	// 1,000,000); 0 when it caught up. A backlog that grows from pass to
	// pass means that retention deletes more slowly than the engine
	// finishes items.
	Backlog int
	// NotificationBacklog is how many notifications delivered before
	// OutboxRetention the pass left when it ran out of time with batches
	// still coming back full (at most 1,000,000); 0 when it caught up or
	// when the store cannot count them (see DeliveredCounter).
	NotificationBacklog int
	// Took is how long the pass took.
	Took time.Duration
}

func (AttemptFinished) isEvent() {}
func (RetryScheduled) isEvent()  {}
func (DeadLettered) isEvent()    {}
func (ItemSucceeded) isEvent()   {}
func (Rescued) isEvent()         {}
func (RunFinished) isEvent()     {}
func (BreakerChanged) isEvent()  {}
func (Redriven) isEvent()        {}
func (RetentionPassed) isEvent() {}
