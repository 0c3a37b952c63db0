package redrive

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// ScopedKey is the key that `redrive run` and `redrive enqueue` give an
// input line: the line's id scoped to its run, "<run ID>/<id>", since item
// keys are unique per pipeline and ids only per input file.
func ScopedKey(runID int64, id string) string { return strconv.FormatInt(runID, 10) + "/" + id }

// keyRunsLimit bounds how many runs ResolveKey looks through, newest
// first, for a key scoped to its run when the filter names no run.
const keyRunsLimit = 1000

// ResolveKey returns f with its Key as the store holds it, so that a user
// may give the key they chose: an item's key as submitted, or the id of an
// input line that `redrive run` or `redrive enqueue` stored as
// ScopedKey(run, id). A key that an item has as it is stays as it is.
// Otherwise the scoped key is looked for in f.RunID, or, without a run, in
// the runs of f.Pipeline (all pipelines when empty), newest first, at most
// 1000 of them. Found in one run, f.Key becomes the scoped key (and
// f.RunID that run); found in several, the error is a *FilterError on
// "key" that names them. Found nowhere, f is returned unchanged, for
// CheckFilter to report.
func ResolveKey(ctx context.Context, s Store, f ItemFilter) (ItemFilter, error) {
	if f.Key == "" {
		return f, nil
	}
	n, err := s.Count(ctx, ItemFilter{RunID: f.RunID, Pipeline: f.Pipeline, Key: f.Key, Limit: 1})
	if err != nil || n > 0 {
		return f, err
	}
	if f.RunID != 0 {
		scoped := ScopedKey(f.RunID, f.Key)
		n, err := s.Count(ctx, ItemFilter{RunID: f.RunID, Pipeline: f.Pipeline, Key: scoped, Limit: 1})
		if err != nil || n == 0 {
			return f, err
		}
		f.Key = scoped
		return f, nil
	}
	type match struct {
		run  int64
		item int64
	}
	var found []match
	seen, before := 0, int64(0)
	for seen < keyRunsLimit {
		runs, err := s.ListRuns(ctx, RunFilter{Pipeline: f.Pipeline, BeforeID: before, Limit: min(100, keyRunsLimit-seen)})
		if err != nil {
			return f, fmt.Errorf("redrive: resolve key: %w", err)
		}
		for _, r := range runs {
			items, err := s.ListItems(ctx, ItemFilter{RunID: r.ID, Pipeline: r.Pipeline, Key: ScopedKey(r.ID, f.Key), Limit: 1})
			if err != nil {
				return f, fmt.Errorf("redrive: resolve key: %w", err)
			}
			for _, it := range items {
				found = append(found, match{run: r.ID, item: it.ID})
			}
		}
		seen += len(runs)
		if len(runs) == 0 {
			break
		}
		before = runs[len(runs)-1].ID
	}
	switch len(found) {
	case 0:
		return f, nil
	case 1:
		f.RunID, f.Key = found[0].run, ScopedKey(found[0].run, f.Key)
		return f, nil
	}
	names := make([]string, len(found))
	for i, m := range found {
		names[i] = fmt.Sprintf("item %d of run %d", m.item, m.run)
	}
	return f, badFilter("key", "key %q is the id of input lines in %d runs (%s): select the run", f.Key, len(found), strings.Join(names, ", "))
}

// ResolveFilter is ResolveKey, then CheckFilter: it returns the filter to
// use, or the reason it selects nothing (errors as CheckFilter's).
func ResolveFilter(ctx context.Context, s Store, f ItemFilter) (ItemFilter, error) {
	if err := f.Validate(); err != nil {
		return f, fmt.Errorf("%w: %w", ErrBadFilter, err)
	}
	r, err := ResolveKey(ctx, s, f)
	if err != nil {
		return f, err
	}
	return r, CheckFilter(ctx, s, r)
}
