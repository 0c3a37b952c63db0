package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/redrive/redrive"
	"github.com/spf13/cobra"
)

// stageCounts is one pipeline stage's items by state.
type stageCounts struct {
	Pipeline string `json:"pipeline"`
	Stage    string `json:"stage"`
	redrive.Counts
}

// statsJSON is the JSON form of `redrive stats`.
type statsJSON struct {
	RunID    int64         `json:"run_id,omitempty"`
	Pipeline string        `json:"pipeline,omitempty"`
	Stages   []stageCounts `json:"stages"`
	// Purged counts, per pipeline, the items purged from the dead-letter
	// queue: their rows are gone, so they are in no stage, but their runs
	// keep counting them and so does Totals.
	Purged         []pipelineCount           `json:"purged"`
	Totals         redrive.Counts            `json:"totals"`
	RetryHistogram []redrive.HistogramBucket `json:"retry_histogram"`
	TopErrors      []redrive.ErrorCount      `json:"top_errors"`
	// ErrorGroups are the failures grouped by cause, ranked by deaths.
	ErrorGroups []redrive.ErrorGroup `json:"error_groups"`
}

// pipelineCount is a count of items of a pipeline.
type pipelineCount struct {
	Pipeline string `json:"pipeline"`
	Count    int    `json:"count"`
}

// newStatsCmd returns `redrive stats`.
func newStatsCmd() *cobra.Command {
	var (
		run      int64
		pipeline string
		top      int
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count items by pipeline, stage and state; retry histogram; top errors; errors by cause",
		Long: `Count items by pipeline, stage and state, with the retry histogram of finished
items, the most common errors per stage, and the failures grouped by cause
(messages that differ only in ids, numbers, quoted text, URLs or addresses are
one cause), ranked by dead items, for all runs or one (--run).

Items purged from the dead-letter queue are counted per pipeline, in a
"(purged)" row: they are in no stage any more, but their runs keep counting
them, and so does the TOTAL row.

The retry histogram covers all pipelines of the selection: --pipeline narrows
the counts and top errors only.`,
		Args: noArgs,
	}
	cmd.Flags().Int64Var(&run, "run", 0, "only items of this run ID (default: all runs)")
	cmd.Flags().StringVar(&pipeline, "pipeline", "", "only this pipeline's counts and errors")
	cmd.Flags().IntVar(&top, "top", 5, "errors to show per stage, and twice as many causes (1 to 100)")
	asJSON := addJSONFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if run < 0 {
			return flagErrorf("run", "%d is not a run ID: give a positive ID (see `redrive runs list`)", run)
		}
		if top < 1 || top > 100 {
			return flagErrorf("top", "%d is out of range: give 1 to 100", top)
		}
		return withStore(cmd, func(ctx context.Context, s redrive.Store) error {
			var runs []redrive.Run
			if run > 0 {
				r, err := s.GetRun(ctx, run)
				runs = append(runs, r)
				if err != nil {
					return notFound(err, fmt.Sprintf("invalid --run: run %d", run), "see `redrive runs list`")
				}
			}
			if pipeline != "" {
				if err := checkFilter(ctx, s, redrive.ItemFilter{RunID: run, Pipeline: pipeline}); err != nil {
					return err
				}
			}
			counts, err := s.StateCounts(ctx, run)
			if err != nil {
				return fmt.Errorf("count items: %w", err)
			}
			hist, err := s.RetryHistogram(ctx, run)
			if err != nil {
				return fmt.Errorf("retry histogram: %w", err)
			}
			errs, err := s.TopErrors(ctx, redrive.ErrorFilter{RunID: run, Pipeline: pipeline, Limit: top})
			if err != nil {
				return fmt.Errorf("top errors: %w", err)
			}
			groups, err := redrive.ErrorGroups(ctx, s, redrive.ItemFilter{RunID: run, Pipeline: pipeline})
			if err != nil {
				return fmt.Errorf("errors by cause: %w", err)
			}
			if groups == nil {
				groups = []redrive.ErrorGroup{}
			}
			if run == 0 {
				if runs, err = allRuns(ctx, s, pipeline); err != nil {
					return fmt.Errorf("count purged items: %w", err)
				}
			}
			out := statsJSON{RunID: run, Pipeline: pipeline, Stages: []stageCounts{}, Purged: []pipelineCount{}, RetryHistogram: hist, TopErrors: errs, ErrorGroups: groups}
			if out.RetryHistogram == nil {
				out.RetryHistogram = []redrive.HistogramBucket{}
			}
			if out.TopErrors == nil {
				out.TopErrors = []redrive.ErrorCount{}
			}
			idx := map[[2]string]int{}
			for _, c := range counts {
				if pipeline != "" && c.Pipeline != pipeline {
					continue
				}
				k := [2]string{c.Pipeline, c.Stage}
				i, ok := idx[k]
				if !ok {
					i = len(out.Stages)
					idx[k] = i
					out.Stages = append(out.Stages, stageCounts{Pipeline: c.Pipeline, Stage: c.Stage})
				}
				out.Stages[i].Add(c.State, c.Count)
				out.Totals.Add(c.State, c.Count)
			}
			sort.SliceStable(out.Stages, func(i, j int) bool {
				if out.Stages[i].Pipeline != out.Stages[j].Pipeline {
					return out.Stages[i].Pipeline < out.Stages[j].Pipeline
				}
				return false // keep the store's stage order within a pipeline
			})
			purged := map[string]int{}
			for _, r := range runs {
				if r.Counts.Purged > 0 && (pipeline == "" || r.Pipeline == pipeline) {
					purged[r.Pipeline] += r.Counts.Purged
				}
			}
			for p, n := range purged {
				out.Purged = append(out.Purged, pipelineCount{Pipeline: p, Count: n})
				out.Totals.Purged += n
				out.Totals.Total += n
			}
			sort.Slice(out.Purged, func(i, j int) bool { return out.Purged[i].Pipeline < out.Purged[j].Pipeline })
			w := cmd.OutOrStdout()
			if *asJSON {
				return writeJSON(w, out)
			}
			t := newTable(w, "PIPELINE", "STAGE", "PENDING", "RUNNING", "SUCCEEDED", "DEAD", "CANCELED", "PURGED", "TOTAL")
			for i, sc := range out.Stages {
				t.row(sc.Pipeline, sc.Stage, sc.Pending, sc.Running, sc.Succeeded, sc.Dead, sc.Canceled, "-", sc.Total)
				if i+1 == len(out.Stages) || out.Stages[i+1].Pipeline != sc.Pipeline {
					if n := purged[sc.Pipeline]; n > 0 {
						t.row(sc.Pipeline, "(purged)", "-", "-", "-", "-", "-", n, n)
						delete(purged, sc.Pipeline)
					}
				}
			}
			for _, pc := range out.Purged {
				if n, left := purged[pc.Pipeline]; left {
					// A pipeline whose items were all purged has no stage row.
					t.row(pc.Pipeline, "(purged)", "-", "-", "-", "-", "-", n, n)
				}
			}
			c := out.Totals
			t.row("TOTAL", "", c.Pending, c.Running, c.Succeeded, c.Dead, c.Canceled, c.Purged, c.Total)
			if err := t.flush(); err != nil {
				return err
			}
			if err := writeHistogram(w, out.RetryHistogram); err != nil {
				return err
			}
			if err := writeTopErrors(w, out.TopErrors); err != nil {
				return err
			}
			return writeErrorGroups(w, out.ErrorGroups, 2*top)
		})
	}
	return cmd
}

// allRuns returns the runs of pipeline (all runs when empty), newest first.
func allRuns(ctx context.Context, s redrive.Store, pipeline string) ([]redrive.Run, error) {
	var out []redrive.Run
	before := int64(0)
	for {
		page, err := s.ListRuns(ctx, redrive.RunFilter{Pipeline: pipeline, BeforeID: before, Limit: 1000})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < 1000 {
			return out, nil
		}
		before = page[len(page)-1].ID
	}
}
