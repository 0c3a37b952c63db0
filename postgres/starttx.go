package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// StartRunTx starts a run of pipeline p in the caller's transaction: it
// creates the run (or resumes the run of that pipeline and opts.Name) and
// enqueues items at p's first stage. The run and its items exist if and
// only if tx commits, so work is never enqueued for a change that rolled
// back, nor lost for one that committed; workers are notified on commit.
// Only p's name and its first stage's name are used, so any process can
// enqueue for pipelines that other processes work.
func (s *Store) StartRunTx(ctx context.Context, tx pgx.Tx, p redrive.Pipeline, items []redrive.NewItem, opts redrive.RunOptions) (redrive.Run, []redrive.Enqueued, error) {
	if p.Name == "" || len(p.Stages) == 0 || p.Stages[0].Name == "" {
		return redrive.Run{}, nil, fmt.Errorf("postgres: start run: %w: a name and a first stage are needed", redrive.ErrInvalidPipeline)
	}
	now := time.Now()
	run, _, err := s.CreateRunTx(ctx, tx, p.Name, opts, now)
	if err != nil {
		return redrive.Run{}, nil, err
	}
	res, err := s.EnqueueTx(ctx, tx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: p.Name, Stage: p.Stages[0].Name, Items: items, Now: now})
	if err != nil {
		return redrive.Run{}, nil, err
	}
	for _, e := range res {
		if !e.Existing {
			run.Counts.Add(redrive.StatePending, 1)
		}
	}
	return run, res, nil
}
