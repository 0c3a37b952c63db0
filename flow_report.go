package redrive

import (
	"context"
	"slices"
	"time"
)

// LimitReporter is implemented by stores that list the waits of a run's rate-limited
// attempts, from which RunLimitedTime computes how long the run waited on rate limits.
// Both the SQLite and the PostgreSQL store implement it.
type LimitReporter interface {
	// RateLimitedWaits returns, for every rate-limited attempt of the run, its stage,
	// when it finished and how long the item was to wait, ordered by finish time.
	RateLimitedWaits(ctx context.Context, runID int64) ([]Wait, error)
}

// Wait is the wait that followed one rate-limited attempt.
type Wait struct {
	// Stage is the stage of the attempt.
	Stage string `json:"stage"`
	// From is when the attempt finished and the wait began.
	From time.Time `json:"from"`
	// Delay is how long the item was to wait.
	Delay time.Duration `json:"delay"`
}

// LimitedTime is how much of a run's time was spent waiting on rate limits: the
// union of the waits after its rate-limited attempts, so that a thousand items
// waiting out one Retry-After together count its length once.
type LimitedTime struct {
	// Total is the run's wall time during which some item waited on a limit.
	Total time.Duration `json:"total"`
	// ByStage is the same, stage by stage.
	ByStage map[string]time.Duration `json:"by_stage,omitempty"`
	// Elapsed is the run's wall time so far: from its creation to its end (or to now
	// while it runs).
	Elapsed time.Duration `json:"elapsed"`
}

// RunLimitedTime computes the LimitedTime of run r at now. ok is false when the
// store does not list waits.
func RunLimitedTime(ctx context.Context, s Store, r Run, now time.Time) (lt LimitedTime, ok bool, err error) {
	lr, ok := s.(LimitReporter)
	if !ok {
		return LimitedTime{}, false, nil
	}
	waits, err := lr.RateLimitedWaits(ctx, r.ID)
	if err != nil {
		return LimitedTime{}, true, err
	}
	end := now
	if !r.FinishedAt.IsZero() {
		end = r.FinishedAt
	}
	lt.Elapsed = max(end.Sub(r.CreatedAt), 0)
	lt.Total = unionLength(waits, end)
	byStage := map[string][]Wait{}
	for _, w := range waits {
		byStage[w.Stage] = append(byStage[w.Stage], w)
	}
	if len(byStage) > 0 {
		lt.ByStage = map[string]time.Duration{}
		for st, ws := range byStage {
			lt.ByStage[st] = unionLength(ws, end)
		}
	}
	return lt, true, nil
}

// unionLength is the length of the union of the waits, each cut at end.
func unionLength(ws []Wait, end time.Time) time.Duration {
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b Wait) int { return a.From.Compare(b.From) })
	var total time.Duration
	var curFrom, curTo time.Time
	for _, w := range ws {
		from, to := w.From, w.From.Add(w.Delay)
		if to.After(end) {
			to = end
		}
		if !to.After(from) {
			continue
		}
		if curTo.IsZero() || from.After(curTo) {
			total += curTo.Sub(curFrom)
			curFrom, curTo = from, to
			continue
		}
		if to.After(curTo) {
			curTo = to
		}
	}
	return total + curTo.Sub(curFrom)
}
