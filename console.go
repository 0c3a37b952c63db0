package redrive

import (
	"context"
	"fmt"
	"time"
)

// Console is what a store provides for the operators' console beyond the
// engine's needs: the exact error messages of failures, counted, for
// grouping by cause, and the audit log of operators' actions.
type Console interface {
	// RecordAction appends a to the audit log and returns its ID; a.ID is
	// ignored.
	RecordAction(ctx context.Context, a AuditAction) (int64, error)
	// ListActions lists the audit log, newest first.
	ListActions(ctx context.Context, f AuditFilter) ([]AuditAction, error)
	// PauseStage records p's stage as paused; pausing a paused stage
	// keeps its first record and reports false.
	PauseStage(ctx context.Context, p StagePause) (paused bool, err error)
	// ResumeStage removes the pause of a stage and reports whether it was
	// paused.
	ResumeStage(ctx context.Context, pipeline, stage string) (resumed bool, err error)
	// PausedStages lists the paused stages by pipeline and stage.
	PausedStages(ctx context.Context) ([]StagePause, error)
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
	// FailureGroups groups failures by pipeline, stage, class and the
	// fingerprint the store keeps with each failure (see Fingerprint): the
	// items selected as DeadErrors selects them, counted as Dead, and the
	// failed attempts of f.RunID, f.Pipeline, f.Stage and f.Class,
	// counted as Failures (f.ErrorContains and f.Fingerprint apply to
	// both). Groups are ranked as RankErrorGroups ranks them; the first
	// ExampleGroups have examples (ErrorGroup.SetExamples) from the
	// ErrorSamples newest of their dead items, or of their failed attempts
	// when they have no dead item. Its cost grows with the number of
	// failures selected, read from an index, not with the number of
	// distinct messages.
	FailureGroups(ctx context.Context, f ItemFilter) ([]ErrorGroup, error)

	// ActionMarks links audit log entries to the items they changed.
	ActionMarks
}

// ErrorGroups groups the failures selected by f by cause, as the store's
// FailureGroups groups them.
func ErrorGroups(ctx context.Context, s Store, f ItemFilter) ([]ErrorGroup, error) {
	groups, err := s.FailureGroups(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("redrive: error groups: %w", err)
	}
	return groups, nil
}

// AuditAction is one operator action on items, as the audit log records it.
type AuditAction struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	// Actor names who acted: the name of the token used ("default" for
	// the single token of web.Options.Token), or the command line user.
	Actor string `json:"actor"`
	// Kind is what was done: redrive, purge, cancel, retry_now, pause or
	// resume.
	Kind string `json:"kind"`
	// Filter is the selection the action applied to, as URL query
	// parameters (run=3&stage=fetch), empty for every item.
	Filter string `json:"filter"`
	// Count is how many items it changed.
	Count int `json:"count"`
	// Detail says how, for example "rate 5/s from stage fetch".
	Detail string `json:"detail,omitempty"`
}

// AuditFilter selects audit log entries, newest first.
type AuditFilter struct {
	// BeforeID pages backwards: only entries with a smaller ID. 0 means
	// none.
	BeforeID int64
	// Limit caps the result. 0 means 100.
	Limit int
}

// StagePause records that a stage of a pipeline is paused: no worker
// process claims its items until it is resumed.
type StagePause struct {
	Pipeline string    `json:"pipeline"`
	Stage    string    `json:"stage"`
	By       string    `json:"by"`
	At       time.Time `json:"at"`
	// Reason says why, for the other operators. Default "": none given.
	Reason string `json:"reason,omitempty"`
}
