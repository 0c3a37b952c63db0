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
// Rescued, RunFinished, BreakerChanged and Redriven.
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

// Rescued is sent when the rescuer takes over an item whose lease expired.
type Rescued struct {
	Pipeline string
	Stage    string
	RunID    int64
	ItemID   int64
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

func (AttemptFinished) isEvent() {}
func (RetryScheduled) isEvent()  {}
func (DeadLettered) isEvent()    {}
func (Rescued) isEvent()         {}
func (RunFinished) isEvent()     {}
func (BreakerChanged) isEvent()  {}
func (Redriven) isEvent()        {}
