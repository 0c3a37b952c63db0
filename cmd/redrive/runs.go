package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/runner"
	"github.com/spf13/cobra"
)

// newRunsCmd returns `redrive runs list|show`.
func newRunsCmd() *cobra.Command {
	cmd := newGroupCmd("runs", "List runs or show one with its counts, retries and top errors")
	cmd.AddCommand(newRunsListCmd(), newRunsShowCmd())
	return cmd
}

var runStatuses = []redrive.RunStatus{redrive.RunRunning, redrive.RunCompleted, redrive.RunPartialSuccess, redrive.RunFailed, redrive.RunAborted}

func newRunsListCmd() *cobra.Command {
	var (
		pipeline, status string
		limit            int
	)
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List runs, newest first, with their counts",
		Example: "  redrive runs list --pipeline ocr --status partial_success --limit 10",
		Args:    noArgs,
	}
	cmd.Flags().StringVar(&pipeline, "pipeline", "", "only runs of this pipeline")
	cmd.Flags().StringVar(&status, "status", "", "only runs with this status (running, completed, partial_success, failed, aborted)")
	cmd.Flags().IntVar(&limit, "limit", 20, "at most this many runs (1 to 1000)")
	asJSON := addJSONFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f := redrive.RunFilter{Pipeline: pipeline, Status: redrive.RunStatus(status), Limit: limit}
		if status != "" && !containsStatus(f.Status) {
			return flagErrorf("status", "unknown run status %q: use one of running, completed, partial_success, failed, aborted", status)
		}
		if limit < 1 || limit > 1000 {
			return flagErrorf("limit", "%d is out of range: give 1 to 1000", limit)
		}
		return withStore(cmd, func(ctx context.Context, s redrive.Store) error {
			// A pipeline no run has is a typo, not "no runs".
			if err := checkFilter(ctx, s, redrive.ItemFilter{Pipeline: pipeline}); err != nil {
				return err
			}
			runs, err := s.ListRuns(ctx, f)
			if err != nil {
				return fmt.Errorf("list runs: %w", err)
			}
			if *asJSON {
				out := make([]runJSON, len(runs))
				for i, r := range runs {
					out[i] = runJSON{Run: r, SuccessRate: r.SuccessRate()}
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			w := cmd.OutOrStdout()
			// TOTAL is the sum of the counts after it, purged items
			// included: they were dead or canceled once.
			t := newTable(w, "ID", "PIPELINE", "NAME", "STATUS", "TOTAL", "SUCCEEDED", "DEAD", "CANCELED", "PURGED", "PENDING", "RUNNING", "SUCCESS", "CREATED")
			for _, r := range runs {
				c := r.Counts
				t.row(r.ID, r.Pipeline, r.Name, r.Status, c.Total, c.Succeeded, c.Dead, c.Canceled, c.Purged, c.Pending, c.Running, fmtPct(r.SuccessRate()), fmtTime(r.CreatedAt))
			}
			if err := t.flush(); err != nil {
				return err
			}
			if len(runs) == 0 {
				fmt.Fprintln(w, "(no runs match)")
			}
			return nil
		})
	}
	return cmd
}

func containsStatus(s redrive.RunStatus) bool {
	for _, x := range runStatuses {
		if x == s {
			return true
		}
	}
	return false
}

// runJSON is a run with its success rate, for --json.
type runJSON struct {
	redrive.Run
	SuccessRate float64 `json:"success_rate"`
}

// runDetail is the JSON form of `runs show`.
type runDetail struct {
	Run            runJSON                   `json:"run"`
	RetryHistogram []redrive.HistogramBucket `json:"retry_histogram"`
	TopErrors      []redrive.ErrorCount      `json:"top_errors"`
	WaitingOnLimit *redrive.LimitedTime      `json:"waiting_on_limit,omitempty"`
	// PaceWaits are how long the run's calls waited on their stages' flow
	// control before their attempts started; absent when the store does not
	// keep them.
	PaceWaits []redrive.PaceWait `json:"pace_waits,omitempty"`
}

func newRunsShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a run: status, counts, success rate, options, retry histogram, top errors",
		Args:  oneID("run"),
	}
	asJSON := addJSONFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, _ := parseID(args[0])
		return withStore(cmd, func(ctx context.Context, s redrive.Store) error {
			r, err := s.GetRun(ctx, id)
			if err != nil {
				return notFound(err, fmt.Sprintf("run %d", id), "see `redrive runs list`")
			}
			hist, err := s.RetryHistogram(ctx, id)
			if err != nil {
				return fmt.Errorf("retry histogram of run %d: %w", id, err)
			}
			top, err := s.TopErrors(ctx, redrive.ErrorFilter{RunID: id})
			if err != nil {
				return fmt.Errorf("top errors of run %d: %w", id, err)
			}
			var waiting *redrive.LimitedTime
			if lt, ok, err := redrive.RunLimitedTime(ctx, s, r, time.Now()); err != nil {
				return fmt.Errorf("time run %d waited on rate limits: %w", id, err)
			} else if ok {
				waiting = &lt
			}
			var paced []redrive.PaceWait
			if pr, ok := s.(redrive.PaceRecorder); ok {
				if paced, err = pr.PaceWaits(ctx, id); err != nil {
					return fmt.Errorf("time run %d waited on its pace: %w", id, err)
				}
			}
			if hist == nil {
				hist = []redrive.HistogramBucket{}
			}
			if top == nil {
				top = []redrive.ErrorCount{}
			}
			w := cmd.OutOrStdout()
			if *asJSON {
				return writeJSON(w, runDetail{Run: runJSON{Run: r, SuccessRate: r.SuccessRate()}, RetryHistogram: hist, TopErrors: top, WaitingOnLimit: waiting, PaceWaits: paced})
			}
			c := r.Counts
			o := r.Options
			pairs := []any{
				"Run", r.ID,
				"Pipeline", r.Pipeline,
				"Name", cell(r.Name),
				"Status", r.Status,
				"Created", fmtTime(r.CreatedAt),
				"Finished", fmtTime(r.FinishedAt),
			}
			if r.Reason != "" {
				pairs = append(pairs, "Reason", cell(r.Reason))
			}
			if o.Source != "" || o.SourceHash != "" {
				pairs = append(pairs, "Source", strings.TrimSpace(o.Source+" "+o.SourceHash))
			}
			pairs = append(pairs,
				"Items", itemsSum(c),
				"Success rate", fmt.Sprintf("%s (%d of %d)", fmtPct(r.SuccessRate()), c.Succeeded, c.Total),
				"Options", fmt.Sprintf("success threshold %s, partial threshold %s, failure budget %s, min items %s",
					orDefault(o.SuccessThreshold, redrive.DefaultSuccessThreshold), orDefault(o.PartialThreshold, redrive.DefaultPartialThreshold),
					budget(o.FailureBudget), minItems(o.MinItems)),
			)
			if waiting != nil {
				pairs = append(pairs, "Waiting on limit", runner.FormatLimitedTime(*waiting))
			}
			if len(paced) > 0 {
				pairs = append(pairs, "Waiting on the pace", formatPaceWaits(paced))
			}
			if err := kv(w, pairs...); err != nil {
				return err
			}
			if err := writeHistogram(w, hist); err != nil {
				return err
			}
			return writeTopErrors(w, top)
		})
	}
	return cmd
}

func orDefault(v, def float64) string {
	if v == 0 {
		return fmtPct(def) + " (default)"
	}
	return fmtPct(v)
}

func budget(v float64) string {
	if v == 0 {
		return "none"
	}
	return fmtPct(v)
}

func minItems(n int) string {
	if n == 0 {
		return fmt.Sprintf("%d (default)", redrive.DefaultMinItems)
	}
	return fmt.Sprint(n)
}

// writeHistogram prints the retry histogram with a bar per bucket.
func writeHistogram(w io.Writer, hist []redrive.HistogramBucket) error {
	fmt.Fprintln(w, "\nRetries needed by finished items:")
	if len(hist) == 0 {
		fmt.Fprintln(w, "(no finished items)")
		return nil
	}
	most := 0
	for _, b := range hist {
		most = max(most, b.Items)
	}
	t := newTable(w, "RETRIES", "ITEMS", " ")
	for _, b := range hist {
		bar := ""
		if most > 0 {
			n := (b.Items*40 + most - 1) / most
			for range n {
				bar += "#"
			}
		}
		t.row(b.Retries, b.Items, bar)
	}
	return t.flush()
}

// writeTopErrors prints the most common errors per stage.
func writeTopErrors(w io.Writer, top []redrive.ErrorCount) error {
	fmt.Fprintln(w, "\nTop errors:")
	if len(top) == 0 {
		fmt.Fprintln(w, "(no failed attempts)")
		return nil
	}
	t := newTable(w, "PIPELINE", "STAGE", "CLASS", "COUNT", "ERROR")
	for _, e := range top {
		t.row(e.Pipeline, e.Stage, e.Class, e.Count, truncate(e.Error, 100))
	}
	return t.flush()
}

// itemsSum writes a run's counts as the sum they add up to; purged items
// appear once there are any.
func itemsSum(c redrive.Counts) string {
	sum := fmt.Sprintf("%d = %d succeeded + %d dead + %d canceled + %d pending + %d running", c.Total, c.Succeeded, c.Dead, c.Canceled, c.Pending, c.Running)
	if c.Purged > 0 {
		sum += fmt.Sprintf(" + %d purged", c.Purged)
	}
	return sum
}

// formatPaceWaits says, stage by stage, how long calls waited on their
// flow before their attempts started.
func formatPaceWaits(ws []redrive.PaceWait) string {
	parts := make([]string, 0, len(ws))
	for _, w := range ws {
		mean := time.Duration(0)
		if w.Calls > 0 {
			mean = w.Waited / time.Duration(w.Calls)
		}
		parts = append(parts, fmt.Sprintf("%s: %d calls waited %.1fs before starting, %s per call on average",
			w.Stage, w.Calls, w.Waited.Seconds(), mean.Round(time.Millisecond)))
	}
	return strings.Join(parts, "; ")
}
