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

// Submit enqueues items into a run at firstStage, its pipeline's first
// stage, without a Client: for processes that accept work (an HTTP API, a
// command) while workers elsewhere process it. The insert is atomic and
// idempotent by item key (see Store.Enqueue). A run that had finished
// reopens when it receives new items; an aborted run refuses them with
// ErrRunAborted and nothing is written.
func Submit(ctx context.Context, s Store, runID int64, firstStage string, items []NewItem, now time.Time) ([]Enqueued, error) {
	run, err := s.GetRun(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("redrive: submit: %w", err)
	}
	if run.Status == RunAborted {
		return nil, fmt.Errorf("%w: run %d: %s", ErrRunAborted, runID, run.Reason)
	}
	if len(items) == 0 {
		return []Enqueued{}, nil
	}
	out, err := s.Enqueue(ctx, EnqueueRequest{RunID: runID, Pipeline: run.Pipeline, Stage: firstStage, Items: items, Now: now})
	if err != nil {
		return nil, fmt.Errorf("redrive: submit: %w", err)
	}
	added := false
	for _, e := range out {
		added = added || !e.Existing
	}
	// Read again: the run may have finished while the items were written.
	if run, err = s.GetRun(ctx, runID); err == nil && added && run.Status != RunRunning && run.Status != RunAborted {
		err = s.SetRunStatus(ctx, runID, RunRunning, "", now)
	}
	if err != nil {
		return out, fmt.Errorf("redrive: submit: reopen run %d: %w", runID, err)
	}
	return out, nil
}
