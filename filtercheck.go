package redrive

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// KnownClasses returns the classes a reason may have: the retry package's
// (final, retryable, rate_limited) and the engine's own (canceled,
// invalid_input, lost).
func KnownClasses() []string {
	return []string{"final", "retryable", "rate_limited", ClassCanceled, ClassInvalidInput, ClassLost}
}

// FilterError is a filter field that names something that does not exist.
// It wraps ErrBadFilter.
type FilterError struct {
	// Field is the filter's field: "pipeline", "stage", "class", "key",
	// "fingerprint" or "action", or "from_stage" for a redrive from a stage
	// the items did not reach.
	Field string
	// Msg says what is wrong and what exists.
	Msg string
}

// Error returns "redrive: bad filter: <msg>".
func (e *FilterError) Error() string { return "redrive: bad filter: " + e.Msg }

// Unwrap returns ErrBadFilter.
func (e *FilterError) Unwrap() error { return ErrBadFilter }

func badFilter(field, format string, args ...any) error {
	return &FilterError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// CheckFilter reports a filter that names something that does not exist,
// so that a typo is an error rather than "no items match": a run that does
// not exist (the error wraps ErrNotFound), or a pipeline, stage, class or
// key that no item has, a cause (Fingerprint) that no failure has, or an
// audit entry (ActionID) that does not exist (a *FilterError, which lists
// what exists).
// A class outside KnownClasses is accepted when some dead or canceled item
// has it.
func CheckFilter(ctx context.Context, s Store, f ItemFilter) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadFilter, err)
	}
	if f.RunID != 0 {
		// The run's pipeline, not its counts: the SQLite store counts a
		// run's items to answer GetRun, which cost every page of a
		// listing by run the whole run again.
		get := s.GetRun
		if sr, ok := s.(runStatusReader); ok {
			get = sr.GetRunStatus
		}
		run, err := get(ctx, f.RunID)
		if err != nil {
			return fmt.Errorf("redrive: run %d: %w", f.RunID, err)
		}
		if f.Pipeline != "" && run.Pipeline != f.Pipeline {
			return badFilter("pipeline", "run %d is a run of pipeline %q, not %q", run.ID, run.Pipeline, f.Pipeline)
		}
	} else if f.Pipeline != "" {
		exists, err := pipelineExists(ctx, s, f.Pipeline)
		if err != nil {
			return fmt.Errorf("redrive: check pipeline: %w", err)
		}
		if !exists {
			return badFilter("pipeline", "unknown pipeline %q: no run of it exists", f.Pipeline)
		}
	}
	if f.Class != "" && !slices.Contains(KnownClasses(), f.Class) {
		n, err := s.Count(ctx, ItemFilter{Class: f.Class, States: []State{StateDead, StateCanceled}, Limit: 1})
		if err != nil {
			return fmt.Errorf("redrive: check class: %w", err)
		}
		if n == 0 {
			return badFilter("class", "unknown class %q: use one of %s", f.Class, strings.Join(KnownClasses(), ", "))
		}
	}
	if f.Stage != "" {
		scope := ItemFilter{RunID: f.RunID, Pipeline: f.Pipeline}
		if err := checkStage(ctx, s, scope, f.Stage); err != nil {
			return err
		}
	}
	if f.Fingerprint != "" {
		if err := checkFingerprint(ctx, s, f.Fingerprint); err != nil {
			return err
		}
	}
	if f.ActionID != 0 {
		acts, err := s.ListActions(ctx, AuditFilter{BeforeID: f.ActionID + 1, Limit: 1})
		if err != nil {
			return fmt.Errorf("redrive: check action: %w", err)
		}
		if len(acts) == 0 || acts[0].ID != f.ActionID {
			return badFilter("action", "unknown audit entry %d: the audit log has no such action", f.ActionID)
		}
	}
	if f.Key != "" {
		n, err := s.Count(ctx, ItemFilter{RunID: f.RunID, Pipeline: f.Pipeline, Key: f.Key, Limit: 1})
		if err != nil {
			return fmt.Errorf("redrive: check key: %w", err)
		}
		if n == 0 {
			if f.RunID != 0 {
				return badFilter("key", "unknown key %q: no item of run %d has it (nor %q, as an input line's id)", f.Key, f.RunID, ScopedKey(f.RunID, f.Key))
			}
			return badFilter("key", "unknown key %q: no item has it (nor \"<run>/%s\", as an input line's id, in the newest %d runs)", f.Key, f.Key, keyRunsLimit)
		}
	}
	return nil
}

// checkFingerprint reports a cause (the fingerprint of an error, see
// Fingerprint) that no item's reason and no failed attempt has. The items
// are read first, through their fingerprint index; the attempts only when
// no item has it (items redriven since), from the counts the store keeps
// by cause.
func checkFingerprint(ctx context.Context, s Store, fp string) error {
	n, err := s.Count(ctx, ItemFilter{Fingerprint: fp, Limit: 1})
	if err != nil {
		return fmt.Errorf("redrive: check cause: %w", err)
	}
	if n > 0 {
		return nil
	}
	groups, err := s.FailureGroups(ctx, ItemFilter{Fingerprint: fp, States: []State{StateDead, StateCanceled}})
	if err != nil {
		return fmt.Errorf("redrive: check cause: %w", err)
	}
	if len(groups) == 0 {
		return badFilter("fingerprint", "unknown cause %q: no dead item and no failed attempt has it (the errors by cause list the known ones)", fp)
	}
	return nil
}

// checkStage reports a stage at which no item of scope is.
func checkStage(ctx context.Context, s Store, scope ItemFilter, stage string) error {
	scope.Stage, scope.Limit = stage, 1
	n, err := s.Count(ctx, scope)
	if err != nil {
		return fmt.Errorf("redrive: check stage: %w", err)
	}
	if n > 0 {
		return nil
	}
	counts, err := s.StateCounts(ctx, scope.RunID)
	if err != nil {
		return fmt.Errorf("redrive: check stage: %w", err)
	}
	var stages []string
	for _, c := range counts {
		if (scope.Pipeline == "" || c.Pipeline == scope.Pipeline) && !slices.Contains(stages, c.Stage) {
			stages = append(stages, c.Stage)
		}
	}
	where := "any item"
	switch {
	case scope.RunID != 0:
		where = fmt.Sprintf("an item of run %d", scope.RunID)
	case scope.Pipeline != "":
		where = fmt.Sprintf("an item of pipeline %q", scope.Pipeline)
	}
	if len(stages) == 0 {
		return badFilter("stage", "unknown stage %q: no item is at any stage", stage)
	}
	return badFilter("stage", "unknown stage %q: it is not the stage of %s (stages with items: %s)", stage, where, strings.Join(stages, ", "))
}

// pipelineChecker is implemented by stores that tell whether a pipeline
// has runs without counting a run's items (the SQLite store).
type pipelineChecker interface {
	PipelineExists(ctx context.Context, pipeline string) (bool, error)
}

// pipelineExists reports whether s holds a run of pipeline.
func pipelineExists(ctx context.Context, s Store, pipeline string) (bool, error) {
	if pc, ok := s.(pipelineChecker); ok {
		return pc.PipelineExists(ctx, pipeline)
	}
	runs, err := s.ListRuns(ctx, RunFilter{Pipeline: pipeline, Limit: 1})
	return len(runs) > 0, err
}
