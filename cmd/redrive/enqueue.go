package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/runner"
)

// enqueueBatch is how many items one transaction adds: a large file is
// not held in one transaction, and a rerun after a failure adds only what
// is missing (keys make it idempotent).
const enqueueBatch = 1000

// enqueueResult is what `redrive enqueue` prints with --json.
type enqueueResult struct {
	RunID    int64  `json:"run_id"`
	RunName  string `json:"run_name"`
	Pipeline string `json:"pipeline"`
	Items    int    `json:"items"`
	Added    int    `json:"added"`
	Existing int    `json:"existing"`
	// Invalid counts the lines that were not JSON, recorded dead.
	Invalid int `json:"invalid"`
	// Warning says when no live worker serves the pipeline (the items
	// stay pending until one runs), or when the first stage given by
	// --stage could not be checked.
	Warning string `json:"warning,omitempty"`
}

func newEnqueueCmd() *cobra.Command {
	var (
		input, runName, stage string
		asJSON                bool
	)
	cmd := &cobra.Command{
		Use:   "enqueue PIPELINE --input ITEMS.jsonl",
		Short: "Add the items of a JSONL file to a pipeline's run without waiting for them",
		Long: `Add the items of a JSONL file to a run of a pipeline and return at once;
workers (redrive serve --pipeline, or a Go program) process them.

PIPELINE is a pipeline file (.yaml or .yml, whose name and first stage are
used) or a pipeline's name with --stage naming its first stage. A name is
checked against what the database knows: a pipeline that has no run and
that no live worker serves, or a --stage that is not the first stage its
items started at, is refused (give its pipeline file instead). The command
warns when no live worker serves the pipeline: the items stay pending until
one runs (redrive serve --pipeline FILE, redrive run, or your program). Items are
read as by ` + "`redrive run`" + `: one JSON value per line, identified by its "id"
field or a hash of the line; lines that are not JSON are recorded dead
(class invalid_input). The run is --run, by default "<pipeline>:<input file
name>@<hash of its content>" as for redrive run, created when missing.
Enqueueing the same file again adds nothing twice. Prints the run's ID and how many items were new
and how many existed.`,
		Example: `  redrive enqueue ocr.yaml --input scans.jsonl --db postgres://app@db/app
  redrive enqueue ocr --stage fetch --input scans.jsonl --run nightly --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("want exactly one pipeline (file or name), got %d arguments (see %s --help)", len(args), cmd.CommandPath())
			}
			if input == "" {
				return flagErrorf("input", "required: the JSONL file of items")
			}
			name, first, err := enqueueTarget(args[0], stage)
			if err != nil {
				return err
			}
			hash, err := runner.InputHash(input)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return flagErrorf("input", "%v", err)
				}
				return err
			}
			// The default run is the one `redrive run` makes of this file, and
			// records the file's hash as it does, so that either command
			// resumes it; a run named with --run may gather several files.
			runOpts := redrive.RunOptions{Name: runName, Source: input}
			if runName == "" {
				runOpts.Name = runner.DefaultRunName(&runner.Spec{Name: name}, input, hash)
				runOpts.SourceHash = hash
			}
			runName = runOpts.Name
			lines, err := runner.ReadInput(input)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return flagErrorf("input", "%v", err)
				}
				return err
			}
			if len(lines) == 0 {
				// A run of no items would never finish: nothing to enqueue.
				return flagErrorf("input", "%s holds no items (no line with a JSON value): nothing to enqueue", input)
			}
			ctx := cmd.Context()
			s, closeStore, err := openStore(ctx, dbConfigFrom(ctx).URL)
			if err != nil {
				return err
			}
			defer closeStore()
			return func() error {
				var warnings []string
				if stage != "" {
					w, err := checkStage(ctx, s, name, first)
					if err != nil {
						return err
					}
					warnings = append(warnings, w...)
				}
				now := time.Now()
				run, _, err := s.CreateRun(ctx, name, runOpts, now)
				if err != nil {
					return fmt.Errorf("enqueue: create run: %w", err)
				}
				res := enqueueResult{RunID: run.ID, RunName: runName, Pipeline: name, Items: len(lines)}
				for start := 0; start < len(lines); start += enqueueBatch {
					batch := lines[start:min(start+enqueueBatch, len(lines))]
					items := make([]redrive.NewItem, len(batch))
					for i, l := range batch {
						items[i] = redrive.NewItem{Key: runner.ItemKey(run.ID, l.ID), Payload: l.Payload, Invalid: l.Invalid, OrderAt: l.OrderAt}
					}
					var out []redrive.Enqueued
					run, out, err = redrive.Submit(ctx, s, run, first, items, time.Now())
					if err != nil {
						return fmt.Errorf("enqueue: items from line %d of %s: %w", batch[0].Number, input, err)
					}
					for i, e := range out {
						switch {
						case e.Existing:
							res.Existing++
						case items[i].Invalid != "":
							res.Invalid++
							res.Added++
						default:
							res.Added++
						}
					}
				}
				if res.Added > res.Invalid {
					live, err := redrive.LiveWorkers(ctx, s, name, time.Now())
					if err != nil {
						return fmt.Errorf("enqueue: look for workers: %w", err)
					}
					if len(live) == 0 {
						warnings = append(warnings, fmt.Sprintf("no live worker serves pipeline %s: its %s stay pending until one runs "+
							"(`redrive serve --pipeline FILE`, `redrive run` of its file, or your program's worker; see `redrive workers`)", name, plural(res.Added-res.Invalid, "new item")))
					}
				}
				res.Warning = strings.Join(warnings, "; ")
				out := cmd.OutOrStdout()
				for _, w := range warnings {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
				}
				if asJSON {
					return json.NewEncoder(out).Encode(res)
				}
				_, err = fmt.Fprintf(out, "run %d (%s) of pipeline %s: %d items, %d new, %d existing, %d invalid (recorded dead)\n",
					res.RunID, res.RunName, res.Pipeline, res.Items, res.Added, res.Existing, res.Invalid)
				return err
			}()
		},
	}
	f := cmd.Flags()
	f.StringVarP(&input, "input", "i", "", "JSONL file of items, one JSON value per line (required)")
	f.StringVar(&runName, "run", "", `name of the run to add to, created when missing (default "<pipeline>:<input file name>@<content hash>", as redrive run)`)
	f.StringVar(&stage, "stage", "", "first stage of PIPELINE when it is a name rather than a file")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// enqueueTarget returns the pipeline name and first stage that arg (a
// pipeline file or a name) and --stage give.
func enqueueTarget(arg, stage string) (name, first string, err error) {
	if ext := filepath.Ext(arg); ext == ".yaml" || ext == ".yml" {
		if stage != "" {
			return "", "", flagErrorf("stage", "is for a pipeline given by name; %s names its stages", arg)
		}
		spec, err := runner.LoadFile(arg)
		if err != nil {
			return "", "", exitWith(exitUsage, err)
		}
		if len(spec.Stages) == 0 {
			return "", "", exitWith(exitUsage, fmt.Errorf("%s: the pipeline has no stages", arg))
		}
		return spec.Name, spec.Stages[0].Name, nil
	}
	if stage == "" {
		return "", "", flagErrorf("stage", "required when PIPELINE (%q) is a name rather than a .yaml file: the pipeline's first stage", arg)
	}
	if strings.TrimSpace(arg) == "" {
		return "", "", usageErrorf("empty pipeline name")
	}
	return arg, stage, nil
}

// checkStage checks a pipeline given by name and its first stage given by
// --stage against what the database knows, since no pipeline file says
// what they are: the stage the newest items of the pipeline started at,
// and the live workers that serve it. A pipeline that nothing knows, or a
// stage that is not the one its items start at, is refused: items at a
// stage no worker has would stay pending for ever. When the pipeline is
// served but has no items yet, the stage cannot be checked, which the
// returned warning says.
func checkStage(ctx context.Context, s redrive.Store, pipeline, stage string) (warnings []string, err error) {
	known, err := firstStage(ctx, s, pipeline)
	if err != nil {
		return nil, fmt.Errorf("enqueue: check --stage: %w", err)
	}
	if known != "" {
		if known != stage {
			return nil, flagErrorf("stage", "pipeline %s starts at stage %q (where its items start), not %q: name its first stage, or give its pipeline file", pipeline, known, stage)
		}
		return nil, nil
	}
	live, err := redrive.LiveWorkers(ctx, s, pipeline, time.Now())
	if err != nil {
		return nil, fmt.Errorf("enqueue: look for workers: %w", err)
	}
	if len(live) == 0 {
		return nil, usageErrorf("unknown pipeline %q: no item of it is stored and no live worker serves it, so nothing says that %q is its first stage; give its pipeline file (redrive enqueue %s.yaml ...), or start its worker first", pipeline, stage, pipeline)
	}
	return []string{fmt.Sprintf("--stage %q of pipeline %s is not checked: no item of the pipeline is stored yet; if its workers have no such stage, the items wait", stage, pipeline)}, nil
}

// firstStage returns the stage at which the items of the pipeline's newest
// runs started, or "" when none is stored: an item's stage when it is
// still at its first, else the stage of its first attempt.
func firstStage(ctx context.Context, s redrive.Store, pipeline string) (string, error) {
	runs, err := s.ListRuns(ctx, redrive.RunFilter{Pipeline: pipeline, Limit: 5})
	if err != nil {
		return "", err
	}
	for _, r := range runs {
		items, err := s.ListItems(ctx, redrive.ItemFilter{RunID: r.ID, Pipeline: pipeline, Limit: 1})
		if err != nil {
			return "", err
		}
		for _, it := range items {
			if it.StageIndex == 0 {
				return it.Stage, nil
			}
			atts, err := s.Attempts(ctx, it.ID)
			if err != nil {
				return "", err
			}
			for _, a := range atts {
				if a.StageIndex == 0 {
					return a.Stage, nil
				}
			}
		}
	}
	return "", nil
}
