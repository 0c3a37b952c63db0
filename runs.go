package redrive

import (
	"context"
	"fmt"
	"math"
)

// StatusFor is the final status of a run whose items all finished: completed
// when the success rate reaches the success threshold, partial_success when
// it reaches the partial threshold, failed otherwise. An empty run is
// completed.
func StatusFor(c Counts, opts RunOptions) RunStatus {
	opts = opts.withDefaults()
	if c.Total == 0 {
		return RunCompleted
	}
	rate := float64(c.Succeeded) / float64(c.Total)
	switch {
	case rate >= opts.SuccessThreshold:
		return RunCompleted
	case rate >= opts.PartialThreshold:
		return RunPartialSuccess
	default:
		return RunFailed
	}
}

// BudgetExceeded reports whether a run is over its failure budget, and
// says why. A run is over it when either
//
//   - its dead items are more than FailureBudget of its total: whatever
//     the rest does, its final dead rate is over the budget; or
//   - at least MinItems (or all items, when fewer) have finished, and the
//     lower bound of the 99.9 % Wilson interval of the finished items' dead
//     rate is above the budget: the evidence says the run will end over it.
//
// A plain ratio of the finished items misjudges a run early on: the items
// that finish first are not a fair sample, since bad input fails in
// milliseconds while good items take their time, and one retryable death
// more among the first hundred tipped a run whose final dead rate was 1 %
// over a 5 % budget. The bound asks for evidence in proportion to the
// sample: 30 % dead of 100 finished items aborts a 10 % budget, 6 % of 100
// does not abort a 5 % one. The run is checked every RunCheckInterval, and
// so many looks at one run call for a strict level.
func BudgetExceeded(c Counts, opts RunOptions) (string, bool) {
	if opts.FailureBudget <= 0 {
		return "", false
	}
	opts = opts.withDefaults()
	done := c.Succeeded + c.Dead
	if c.Total > 0 && float64(c.Dead) > opts.FailureBudget*float64(c.Total) {
		return fmt.Sprintf("failure budget exceeded: %d of %d items dead (%.1f%% > %.1f%%)",
			c.Dead, c.Total, 100*float64(c.Dead)/float64(c.Total), 100*opts.FailureBudget), true
	}
	minItems := min(opts.MinItems, c.Total)
	if done == 0 || done < minItems {
		return "", false
	}
	rate := float64(c.Dead) / float64(done)
	low := wilsonLower(c.Dead, done, budgetZ)
	if low <= opts.FailureBudget {
		return "", false
	}
	return fmt.Sprintf("failure budget exceeded: %d of %d finished items dead (%.1f%%; at least %.1f%% with 99.9%% confidence > %.1f%%)",
		c.Dead, done, 100*rate, 100*low, 100*opts.FailureBudget), true
}

// budgetZ is the one-sided 99.9 % quantile of the normal distribution.
const budgetZ = 3.09

// wilsonLower is the lower bound of the Wilson score interval of k
// successes in n trials at quantile z.
func wilsonLower(k, n int, z float64) float64 {
	if n == 0 {
		return 0
	}
	p := float64(k) / float64(n)
	nf := float64(n)
	z2 := z * z
	center := p + z2/(2*nf)
	margin := z * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))
	return max(0, (center-margin)/(1+z2/nf))
}

// monitorLoop ends runs whose items all finished and aborts runs over
// their failure budget.
func (e *engine) monitorLoop() {
	defer e.bg.Done()
	for {
		e.checkRuns()
		if !sleep(e.bgCtx, e.cfg.RunCheckInterval) {
			return
		}
	}
}

func (e *engine) checkRuns() {
	ctx := e.bgCtx
	runs, err := e.store.ListRuns(ctx, RunFilter{Status: RunRunning, Limit: 1000})
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("redrive: listing runs failed", "err", err)
		}
		return
	}
	for _, r := range runs {
		if _, ok := e.pipelines[r.Pipeline]; (!ok && len(e.pipelines) > 0) || r.Counts.Total == 0 {
			// Another client's pipeline, or a run still being filled.
			continue
		}
		if reason, over := BudgetExceeded(r.Counts, r.Options); over {
			e.abort(ctx, r, reason)
			continue
		}
		if r.Counts.Pending+r.Counts.Running == 0 {
			e.finish(ctx, r, StatusFor(r.Counts, r.Options), "")
		}
	}
	// Aborted runs (by this process, another one, or an operator) whose
	// running items moved on are canceled again, so their counts settle;
	// the engine cancels what it would have advanced in them.
	aborted, err := e.store.ListRuns(ctx, RunFilter{Status: RunAborted, Limit: 50})
	if err != nil {
		return
	}
	for _, r := range aborted {
		if r.Counts.Pending+r.Counts.Running == 0 {
			e.mu.Lock()
			e.setAbortedLocked(r.ID, "", false)
			e.mu.Unlock()
			continue
		}
		e.mu.Lock()
		e.setAbortedLocked(r.ID, r.Reason, true)
		e.mu.Unlock()
		if r.Counts.Pending > 0 {
			if _, err := e.store.CancelPending(ctx, ItemFilter{RunID: r.ID, States: []State{StatePending}},
				Reason{Class: ClassCanceled, Error: r.Reason, At: e.cfg.Now()}); err != nil {
				e.log.Warn("redrive: canceling items of an aborted run failed", "run", r.ID, "err", err)
			}
		}
	}
}

func (e *engine) abort(ctx context.Context, r Run, reason string) {
	now := e.cfg.Now()
	e.mu.Lock()
	e.setAbortedLocked(r.ID, reason, true)
	e.mu.Unlock()
	if ok, err := e.store.FinishRun(ctx, r.ID, RunAborted, reason, now); err != nil || !ok {
		if err != nil {
			e.log.Warn("redrive: aborting run failed", "run", r.ID, "err", err)
		}
		return // or another process finished or aborted it first
	}
	n, err := e.store.CancelPending(ctx, ItemFilter{RunID: r.ID, States: []State{StatePending}},
		Reason{Class: ClassCanceled, Error: reason, At: now})
	if err != nil {
		e.log.Warn("redrive: canceling items of an aborted run failed", "run", r.ID, "err", err)
	}
	e.log.Warn("redrive: run aborted", "run", r.ID, "pipeline", r.Pipeline, "reason", reason, "canceled", n)
	r.Status, r.Reason, r.FinishedAt = RunAborted, reason, now
	if fresh, err := e.store.GetRun(ctx, r.ID); err == nil {
		r = fresh
	}
	e.c.emit(RunFinished{Run: r})
}

func (e *engine) finish(ctx context.Context, r Run, status RunStatus, reason string) {
	now := e.cfg.Now()
	if ok, err := e.store.FinishRun(ctx, r.ID, status, reason, now); err != nil || !ok {
		if err != nil {
			e.log.Warn("redrive: finishing run failed", "run", r.ID, "err", err)
		}
		return // or another process finished it first: one RunFinished per run
	}
	r.Status, r.Reason, r.FinishedAt = status, reason, now
	e.log.Info("redrive: run finished", "run", r.ID, "pipeline", r.Pipeline, "status", string(status),
		"total", r.Counts.Total, "succeeded", r.Counts.Succeeded, "dead", r.Counts.Dead, "canceled", r.Counts.Canceled)
	e.c.emit(RunFinished{Run: r})
}

// WaitRun waits until a run has reached a final status and none of its
// items is pending or running, and returns it. It polls the store every
// RunCheckInterval, so it also sees runs worked by other processes.
func (c *Client) WaitRun(ctx context.Context, runID int64) (Run, error) {
	for {
		r, err := c.store.GetRun(ctx, runID)
		if err != nil {
			return Run{}, fmt.Errorf("redrive: wait for run %d: %w", runID, err)
		}
		if r.Status != RunRunning && r.Counts.Pending+r.Counts.Running == 0 {
			return r, nil
		}
		if !sleep(ctx, c.cfg.RunCheckInterval) {
			return r, ctx.Err()
		}
	}
}
