package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/redrive/redrive"
)

// checkFilter refuses a filter that names a run that does not exist (exit
// 3) or a pipeline, stage or class no item has (exit 2, naming the flag),
// so that a typo is not answered with "no items match".
func checkFilter(ctx context.Context, s redrive.Store, f redrive.ItemFilter) error {
	return filterErr(f, redrive.CheckFilter(ctx, s, f))
}

// resolveFilter is checkFilter that also returns the filter to use: with
// --key as the user gave it resolved to the key the store holds (an input
// line's id, which `redrive run` and `enqueue` scope to its run; see
// redrive.ResolveKey).
func resolveFilter(ctx context.Context, s redrive.Store, f redrive.ItemFilter) (redrive.ItemFilter, error) {
	r, err := redrive.ResolveFilter(ctx, s, f)
	if err != nil {
		return f, filterErr(f, err)
	}
	return r, nil
}

// filterErr is the command's error for a filter that CheckFilter refused.
func filterErr(f redrive.ItemFilter, err error) error {
	var fe *redrive.FilterError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return flagErrorf(fe.Field, "%s", fe.Msg)
	case errors.Is(err, redrive.ErrNotFound):
		return exitWith(exitNotFound, fmt.Errorf("invalid --run: run %d does not exist (see `redrive runs list`)", f.RunID))
	}
	return err
}

// noteMore tells, on w, that a listing stopped at its limit while more items
// match, and how to see them.
func noteMore(ctx context.Context, w io.Writer, s redrive.Store, f redrive.ItemFilter, items []redrive.Item) error {
	if f.Limit == 0 || len(items) < f.Limit {
		return nil
	}
	next := f
	next.AfterID, next.Limit = items[len(items)-1].ID, 0
	n, err := s.Count(ctx, next)
	if err != nil || n == 0 {
		return err
	}
	fmt.Fprintf(w, "(showing the first %d; %d more match: --after-id %d for the next page, or --limit 0 for all)\n", len(items), n, next.AfterID)
	return nil
}

// warnNoWorker says, on w, which pipelines of the redriven items no live
// worker serves: their items stay pending until one runs.
func warnNoWorker(ctx context.Context, w io.Writer, s redrive.Store, f redrive.ItemFilter) error {
	pipelines := []string{}
	switch {
	case f.Pipeline != "":
		pipelines = append(pipelines, f.Pipeline)
	case f.RunID != 0:
		run, err := s.GetRun(ctx, f.RunID)
		if err != nil {
			return err
		}
		pipelines = append(pipelines, run.Pipeline)
	default:
		counts, err := s.StateCounts(ctx, 0)
		if err != nil {
			return err
		}
		for _, c := range counts {
			if c.State == redrive.StatePending && !slices.Contains(pipelines, c.Pipeline) {
				pipelines = append(pipelines, c.Pipeline)
			}
		}
	}
	var unserved []string
	for _, p := range pipelines {
		live, err := redrive.LiveWorkers(ctx, s, p, time.Now())
		if err != nil {
			return err
		}
		if len(live) == 0 {
			unserved = append(unserved, p)
		}
	}
	for _, p := range unserved {
		fmt.Fprintf(w, "warning: no live worker serves pipeline %s: the redriven items stay pending until one runs (`redrive run` of its pipeline file, `redrive serve --pipeline FILE`, or your program's worker; see `redrive workers`)\n", p)
	}
	return nil
}
