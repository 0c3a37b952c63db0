package redrive

import (
	"context"
	"log/slog"
)

// LogEvents returns an observer that logs events to l: failed attempts and
// retries at debug level, dead letters and breaker changes at warn, runs
// finishing and rescues at info. Payloads are never logged.
func LogEvents(l *slog.Logger) func(Event) {
	return func(ev Event) {
		ctx := context.Background()
		switch e := ev.(type) {
		case AttemptFinished:
			if e.Outcome != OutcomeSucceeded && l.Enabled(ctx, slog.LevelDebug) {
				l.Debug("attempt failed", "pipeline", e.Pipeline, "stage", e.Stage, "item", e.ItemID,
					"attempt", e.Attempt, "outcome", string(e.Outcome), "class", e.Class, "err", e.Error, "delay", e.Delay)
			}
		case RetryScheduled:
			if l.Enabled(ctx, slog.LevelDebug) {
				l.Debug("retry scheduled", "pipeline", e.Pipeline, "stage", e.Stage, "item", e.ItemID,
					"attempt", e.Attempt, "delay", e.Delay, "rate_limited", e.RateLimited)
			}
		case DeadLettered:
			l.Warn("item dead-lettered", "pipeline", e.Pipeline, "run", e.RunID, "item", e.ItemID,
				"stage", e.Reason.Stage, "class", e.Reason.Class, "attempts", e.Reason.Attempts, "err", e.Reason.Error)
		case Rescued:
			l.Info("item rescued after its lease expired", "pipeline", e.Pipeline, "stage", e.Stage, "item", e.ItemID)
		case RunFinished:
			l.Info("run finished", "run", e.Run.ID, "pipeline", e.Run.Pipeline, "status", string(e.Run.Status),
				"total", e.Run.Counts.Total, "succeeded", e.Run.Counts.Succeeded, "dead", e.Run.Counts.Dead,
				"canceled", e.Run.Counts.Canceled, "reason", e.Run.Reason)
		case BreakerChanged:
			l.Warn("circuit breaker changed", "pipeline", e.Pipeline, "stage", e.Stage, "from", e.From.String(), "to", e.To.String())
		case Redriven:
			l.Info("items redriven", "count", e.Count)
		}
	}
}
