package redrive

import (
	"context"
	"fmt"
)

// Console is what a store provides for the operators' console beyond the
// engine's needs: the exact error messages of failures, counted, for
// grouping by cause.
type Console interface {
	// DeadErrors counts the items selected by f (f.States empty means
	// dead; f.AfterID and f.Limit are ignored, every match counts) by
	// pipeline, stage, reason class and exact reason error, most frequent
	// first, then by pipeline, stage, class and error.
	DeadErrors(ctx context.Context, f ItemFilter) ([]ErrorCount, error)
	// AttemptErrors counts the failed attempts (every outcome but
	// succeeded) of f.RunID and f.Pipeline (0 and "" mean all) at stage
	// f.Stage, of class f.Class, whose error contains f.ErrorContains
	// ignoring case ("" means any), by pipeline, stage, class and exact
	// error, in the order of DeadErrors; f's other fields are ignored.
	AttemptErrors(ctx context.Context, f ItemFilter) ([]ErrorCount, error)
}

// ErrorGroups groups the failures selected by f by cause: the dead items f
// selects and the failed attempts of its run, pipeline and stage, merged by
// fingerprint and ranked as GroupErrors ranks them.
func ErrorGroups(ctx context.Context, s Store, f ItemFilter) ([]ErrorGroup, error) {
	dead, err := s.DeadErrors(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("redrive: error groups: %w", err)
	}
	failed, err := s.AttemptErrors(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("redrive: error groups: %w", err)
	}
	return GroupErrors(dead, failed), nil
}
