package redrive

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrRunAborted is returned (wrapped) by Submit for a run that was aborted:
// its new items would only be canceled.
var ErrRunAborted = errors.New("redrive: run aborted")

// Submit enqueues items into run (as just read from s) at firstStage, its
// pipeline's first stage, without a Client: for processes that accept work
// (an HTTP API, a command) while workers elsewhere process it. The insert
// is atomic and idempotent by item key (see Store.Enqueue). A run that had
// finished reopens when it receives new items; an aborted run refuses them
// with ErrRunAborted and nothing is written. It returns the run as it is
// after, with its counts: as read after the insert, or, from a store that
// reads a run's status apart from its counts (SQLite, where counting a
// large run costs more than the insert), run's counts with the added items
// counted as pending. When ctx carries a span (OpenTelemetry), items
// without a TraceParent of their own are submitted with its trace context.
func Submit(ctx context.Context, s Store, run Run, firstStage string, items []NewItem, now time.Time) (Run, []Enqueued, error) {
	if run.Status == RunAborted {
		return run, nil, fmt.Errorf("%w: run %d: %s", ErrRunAborted, run.ID, run.Reason)
	}
	out := []Enqueued{}
	if len(items) > 0 {
		var err error
		items = withTraceContext(ctx, items)
		out, err = s.Enqueue(ctx, EnqueueRequest{RunID: run.ID, Pipeline: run.Pipeline, Stage: firstStage, Items: items, Now: now})
		if err != nil {
			return run, nil, fmt.Errorf("redrive: submit: %w", err)
		}
	}
	added := false
	for _, e := range out {
		added = added || !e.Existing
	}
	// Read again: the run may have finished (or been aborted) while the
	// items were written.
	var (
		after Run
		err   error
	)
	if sr, ok := s.(runStatusReader); ok {
		after, err = sr.GetRunStatus(ctx, run.ID)
		after.Counts = run.Counts
		for i, e := range out {
			if !e.Existing {
				st := StatePending
				if items[i].Invalid != "" {
					st = StateDead
				}
				after.Counts.Add(st, 1)
			}
		}
	} else {
		after, err = s.GetRun(ctx, run.ID)
	}
	if err != nil {
		return run, out, fmt.Errorf("redrive: submit: %w", err)
	}
	if added && after.Status != RunRunning && after.Status != RunAborted {
		if err := s.SetRunStatus(ctx, run.ID, RunRunning, "", now); err != nil {
			return after, out, fmt.Errorf("redrive: submit: reopen run %d: %w", run.ID, err)
		}
		after.Status, after.FinishedAt, after.Reason = RunRunning, time.Time{}, ""
	}
	return after, out, nil
}

// runStatusReader is implemented by stores that read a run without
// counting its items (the SQLite store).
type runStatusReader interface {
	GetRunStatus(ctx context.Context, id int64) (Run, error)
}
