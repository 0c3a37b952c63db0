package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/runner"
)

const runLong = `Run a YAML pipeline over a JSONL file of items.

Every line of the input is one item (blank lines are skipped). An item is
identified by its "id" field, or else by a hash of the line. The run records
the input file's path and content hash; running the same command over the same
input against the same database resumes the run: items that already finished
are not processed again. Other input (another month's items.jsonl) makes a run
of its own; under an explicit --run-name it is an error (exit 2). A line that is not JSON is recorded as a
dead item (class invalid_input) with its line number; the rest runs.

Stages are commands (exec) or HTTP requests (http), each with its own retry
policy; see docs/runner.md for the file format.

Progress goes to stderr: one line redrawn in place on a terminal, otherwise
a line every --progress-interval. The summary goes to stdout (--json for
JSON). Ctrl-C stops gracefully (running attempts finish, up to
--stop-grace); a second Ctrl-C stops at once.

Exit status:
  0    the run completed (success rate >= success_threshold)
  3    the run ended partial_success
  4    the run failed (success rate < partial_threshold)
  5    the run was aborted: its failure budget was exceeded
  6    the run was canceled by an operator
  2    bad usage: flags, pipeline file (with file:line), missing input file,
       a --run-name whose run was made from other input
  1    any other error (database, I/O)
  130  interrupted (SIGINT or SIGTERM); run the same command to resume`

func newRunCmd() *cobra.Command {
	var (
		o         runner.Options
		asJSON    bool
		succ      float64
		partial   float64
		budget    float64
		minItems  int
		metricsAt string
		otlpAt    string
	)
	cmd := &cobra.Command{
		Use:   "run PIPELINE.yaml --input ITEMS.jsonl",
		Short: "Run a YAML pipeline over a JSONL file",
		Long:  runLong,
		Example: `  redrive run pipeline.yaml --input items.jsonl
  redrive run pipeline.yaml --input items.jsonl --db sqlite:work.db --workers 16 --output out.jsonl
  redrive run pipeline.yaml --input items.jsonl --failure-budget 0.1 --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("want exactly one pipeline file, got %d arguments (see %s --help)", len(args), cmd.CommandPath())
			}
			if o.Input == "" {
				return usageErrorf("--input ITEMS.jsonl is required (see %s --help)", cmd.CommandPath())
			}
			f := cmd.Flags()
			if f.Changed("success-threshold") {
				o.Run.SuccessThreshold = &succ
			}
			if f.Changed("partial-threshold") {
				o.Run.PartialThreshold = &partial
			}
			if f.Changed("failure-budget") {
				o.Run.FailureBudget = &budget
			}
			if f.Changed("min-items") {
				o.Run.MinItems = &minItems
			}
			if err := checkRunFlags(cmd, o, succ, partial, budget, minItems); err != nil {
				return err
			}
			spec, err := runner.LoadFile(args[0])
			if err != nil {
				if errors.Is(err, runner.ErrInvalidSpec) || errors.Is(err, os.ErrNotExist) {
					return exitWith(exitUsage, err)
				}
				return err
			}
			if _, err := os.Stat(o.Input); err != nil {
				return exitWith(exitUsage, fmt.Errorf("input: %w", err))
			}
			if err := checkMergedThresholds(cmd, spec, succ, partial); err != nil {
				return err
			}
			db := dbConfigFrom(cmd.Context()).URL
			store, closeStore, err := openStore(cmd.Context(), db)
			if err != nil {
				return err
			}
			defer closeStore()
			o.Store, o.DB = store, redactURL(db)
			if cmd.Flags().Changed("log-format") {
				o.Logger = newLogger(cmd, cmd.ErrOrStderr())
			}
			tp, stopTracing, err := newTracerProvider(cmd.Context(), otlpAt, newLogger(cmd, cmd.ErrOrStderr()))
			if err != nil {
				return err
			}
			defer stopTracing()
			o.TracerProvider = tp
			if metricsAt != "" {
				m, h, err := engineMetrics(store)
				if err != nil {
					return err
				}
				mctx, stopMetrics := context.WithCancel(cmd.Context())
				stopped, err := serveMetrics(mctx, metricsAt, h, newLogger(cmd, cmd.ErrOrStderr()))
				if err != nil {
					stopMetrics()
					return err
				}
				defer func() { stopMetrics(); <-stopped }()
				o.Observers = append(o.Observers, m.Observe)
				// The stages' pace, gate and time limited (redrive_flow_*).
				o.Started = func(c *redrive.Client) { m.TrackFlows(c.FlowStates) }
			}
			o.Progress = cmd.ErrOrStderr()
			o.Terminal = term.IsTerminal(int(os.Stderr.Fd()))
			sum, err := runner.Execute(interruptible(cmd.Context()), spec, o)
			if sum != nil && sum.RunID != 0 {
				out := cmd.OutOrStdout()
				if asJSON {
					enc := json.NewEncoder(out)
					enc.SetIndent("", "  ")
					if werr := enc.Encode(sum); werr != nil {
						return fmt.Errorf("write summary: %w", werr)
					}
				} else if werr := sum.WriteText(out); werr != nil {
					return fmt.Errorf("write summary: %w", werr)
				}
			}
			if err != nil {
				switch {
				case errors.Is(err, runner.ErrUsage), errors.Is(err, runner.ErrInvalidSpec):
					return exitWith(exitUsage, err)
				case errors.Is(err, runner.ErrInterrupted):
					return exitWith(runner.ExitInterrupted, err)
				}
				return err
			}
			switch code := sum.ExitCode(); code {
			case runner.ExitCompleted:
				return nil
			case runner.ExitInterrupted:
				return exitWith(code, fmt.Errorf("interrupted: run %d is not finished; run the same command again to resume", sum.RunID))
			default:
				msg := fmt.Sprintf("run %d ended %s", sum.RunID, sum.Status)
				if sum.Reason != "" {
					msg += ": " + sum.Reason
				}
				return exitWith(code, errors.New(msg))
			}
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.Input, "input", "i", "", "JSONL file of items, one JSON value per line (required)")
	f.IntVarP(&o.Workers, "workers", "w", 0, "attempts running at once (default: the file's workers, else 8)")
	f.StringVar(&o.RunName, "run-name", "", `name of the run; the same name resumes it, with the same input only (default "<pipeline name>:<input file name>@<content hash>")`)
	f.StringVarP(&o.Output, "output", "o", "", `write the succeeded items as JSONL {"id": ..., "output": ...} in input order`)
	f.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	f.DurationVar(&o.ProgressInterval, "progress-interval", 5*time.Second, "how often to print progress when stderr is not a terminal")
	f.Float64Var(&succ, "success-threshold", 0, "success rate for completed, overrides the file's run.success_threshold (default 0.95)")
	f.Float64Var(&partial, "partial-threshold", 0, "success rate for partial_success, overrides run.partial_threshold (default 0.50)")
	f.Float64Var(&budget, "failure-budget", 0, "dead rate above which the run aborts, overrides run.failure_budget (default: none)")
	f.IntVar(&minItems, "min-items", 0, "finished items before the failure budget is judged, overrides run.min_items (default 50)")
	f.DurationVar(&o.LeaseDuration, "lease", 30*time.Second, "how long a killed runner's items stay claimed before a rerun takes them over")
	f.StringVar(&otlpAt, "otlp-endpoint", "", otlpFlagUsage)
	f.StringVar(&metricsAt, "metrics-addr", "", "serve the engine's Prometheus metrics at http://ADDR/metrics while the run lasts (e.g. 127.0.0.1:9090; default: none)")
	f.DurationVar(&o.StopGrace, "stop-grace", 30*time.Second, "how long Ctrl-C lets running attempts finish")
	// run has exit codes of its own: its help lists them, not the root's.
	cmd.SetHelpTemplate(cmd.HelpTemplate())
	return cmd
}

// checkRunFlags checks run's numeric flags, naming the flag at fault.
func checkRunFlags(cmd *cobra.Command, o runner.Options, succ, partial, budget float64, minItems int) error {
	f := cmd.Flags()
	if o.Workers < 0 {
		return flagErrorf("workers", "%d is negative: give 1 or more, or leave it out for the file's workers (else 8)", o.Workers)
	}
	for _, fl := range []struct {
		name string
		v    float64
	}{{"success-threshold", succ}, {"partial-threshold", partial}, {"failure-budget", budget}} {
		if f.Changed(fl.name) && !(fl.v >= 0 && fl.v <= 1) {
			return flagErrorf(fl.name, "%g is not a fraction between 0 and 1 (0.95 means 95%%)", fl.v)
		}
	}
	if f.Changed("min-items") && minItems < 0 {
		return flagErrorf("min-items", "%d is negative", minItems)
	}
	for _, fl := range []struct {
		name string
		v    time.Duration
	}{{"lease", o.LeaseDuration}, {"stop-grace", o.StopGrace}, {"progress-interval", o.ProgressInterval}} {
		if fl.v <= 0 {
			return flagErrorf(fl.name, "%v must be positive", fl.v)
		}
	}
	return nil
}

// checkMergedThresholds checks that the partial threshold does not exceed
// the success threshold once the flags override the file, naming what set
// each.
func checkMergedThresholds(cmd *cobra.Command, spec *runner.Spec, succ, partial float64) error {
	f := cmd.Flags()
	s, sFrom := redrive.DefaultSuccessThreshold, "the default"
	if spec.Run.SuccessThreshold != nil {
		s, sFrom = *spec.Run.SuccessThreshold, "run.success_threshold in "+spec.File
	}
	if f.Changed("success-threshold") {
		s, sFrom = succ, "--success-threshold"
	}
	p, pFrom := redrive.DefaultPartialThreshold, "the default"
	if spec.Run.PartialThreshold != nil {
		p, pFrom = *spec.Run.PartialThreshold, "run.partial_threshold in "+spec.File
	}
	if f.Changed("partial-threshold") {
		p, pFrom = partial, "--partial-threshold"
	}
	if p <= s {
		return nil
	}
	flag := "partial-threshold"
	if !f.Changed(flag) {
		flag = "success-threshold"
	}
	return flagErrorf(flag, "the partial threshold %g (%s) exceeds the success threshold %g (%s)", p, pFrom, s, sFrom)
}

// interruptible returns a context canceled by the first SIGINT or SIGTERM;
// a second one exits at once with status 130.
func interruptible(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ch
		cancel()
		<-ch
		fmt.Fprintln(os.Stderr, "\nredrive: interrupted again: stopping at once; the same command resumes (running attempts will be retried)")
		os.Exit(runner.ExitInterrupted)
	}()
	return ctx
}
