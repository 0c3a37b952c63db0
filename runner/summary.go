package runner

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redrive/redrive"
)

// Exit statuses of `redrive run`.
const (
	// ExitCompleted: the run ended completed.
	ExitCompleted = 0
	// ExitError: anything else went wrong (database, I/O).
	ExitError = 1
	// ExitUsage: bad command line, pipeline file or missing input file.
	ExitUsage = 2
	// ExitPartial: the run ended partial_success.
	ExitPartial = 3
	// ExitFailed: the run ended failed.
	ExitFailed = 4
	// ExitAborted: the run was aborted because its failure budget was
	// exceeded.
	ExitAborted = 5
	// ExitCanceled: the run was canceled by an operator (redrive's API or
	// Client.CancelRun) while it ran.
	ExitCanceled = 6
	// ExitInterrupted: stopped by SIGINT or SIGTERM; the same command resumes.
	ExitInterrupted = 130
)

// Seconds is a duration in seconds, marshalled as a JSON number.
type Seconds float64

// InputCounts describe the input file.
type InputCounts struct {
	// File is the input file.
	File string `json:"file"`
	// Items counts its non-blank lines.
	Items int `json:"items"`
	// Invalid counts the lines that were not JSON or repeated an id; they
	// are dead with class invalid_input.
	Invalid int `json:"invalid"`
	// Added counts the items added to the run by this invocation.
	Added int `json:"added"`
	// Existing counts the items the run already held (a resumed run).
	Existing int `json:"existing"`
}

// PaceWait is the time a dependency's calls waited on its stages' flow control before
// they started (redrive.FlowState.Waited and Calls).
type PaceWait struct {
	// Dependency is the stages' dependency, or the stage's name when it names none.
	Dependency string `json:"dependency"`
	// Calls is how many calls the flow control let start.
	Calls int64 `json:"calls"`
	// Waited is the time they waited, summed over the calls.
	Waited Seconds `json:"waited_seconds"`
}

// paceWaits turns the flow states of pipeline's client into the summary's PaceWaits,
// leaving out the dependencies that paced no call.
func paceWaits(pipeline string, states []redrive.FlowState) []PaceWait {
	var out []PaceWait
	for _, f := range states {
		if f.Calls == 0 && f.Waited == 0 {
			continue
		}
		out = append(out, PaceWait{Dependency: strings.TrimPrefix(f.Dependency, pipeline+"/"), Calls: f.Calls, Waited: Seconds(f.Waited.Seconds())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dependency < out[j].Dependency })
	return out
}

// Budget reports a run's failure budget.
type Budget struct {
	// Configured is the dead rate allowed; 0 means no budget.
	Configured float64 `json:"configured"`
	// MinItems is how many items must finish before the budget is judged.
	MinItems int `json:"min_items"`
	// DeadRate is dead over finished (succeeded + dead), as the engine
	// judges the budget.
	DeadRate float64 `json:"dead_rate"`
	// Exceeded reports whether the budget was exceeded (the run aborted).
	Exceeded bool `json:"exceeded"`
}

// Summary is the final accounting of a run, printed by `redrive run`.
type Summary struct {
	// RunID and RunName identify the run.
	RunID   int64  `json:"run_id"`
	RunName string `json:"run_name"`
	// Pipeline is the pipeline's name.
	Pipeline string `json:"pipeline"`
	// Spec is the pipeline file, named in the command that works redriven
	// items.
	Spec string `json:"spec,omitempty"`
	// DB is the database, password redacted.
	DB string `json:"db"`
	// Status is the run's status (running if interrupted).
	Status redrive.RunStatus `json:"status"`
	// Reason says why an aborted run aborted.
	Reason string `json:"reason,omitempty"`
	// Interrupted reports a graceful stop before the run ended.
	Interrupted bool `json:"interrupted"`
	// Resumed reports that the run existed and held some of the items.
	Resumed bool `json:"resumed"`
	// Input describes the input file.
	Input InputCounts `json:"input"`
	// Counts are the run's items by state; they add up to Counts.Total.
	Counts redrive.Counts `json:"counts"`
	// SuccessRate is succeeded over total.
	SuccessRate float64 `json:"success_rate"`
	// SuccessThreshold and PartialThreshold are the run's thresholds,
	// defaults applied (0.95 and 0.50).
	SuccessThreshold float64 `json:"success_threshold"`
	PartialThreshold float64 `json:"partial_threshold"`
	// FailureBudget reports the failure budget.
	FailureBudget Budget `json:"failure_budget"`
	// DeadByClass counts the dead items by the class of their reason
	// (final, retryable, rate_limited, invalid_input, lost).
	DeadByClass map[string]int `json:"dead_by_class"`
	// Retries and RateLimitWaits count the retries and rate-limited waits
	// scheduled by this invocation.
	Retries        int `json:"retries"`
	RateLimitWaits int `json:"rate_limit_waits"`
	// WaitingOnLimit is how much of the run's time its items spent waiting on
	// rate limits (nil when the store cannot tell).
	WaitingOnLimit *redrive.LimitedTime `json:"waiting_on_limit,omitempty"`
	// Paced is, for each dependency whose stage's flow control paced calls in this
	// invocation, how long those calls waited for their turn before their attempts
	// started: the pace, the gate and the outage pause (nil when nothing was paced).
	// These waits are the process's, kept in memory: the store knows only the waits
	// after rate-limited answers (WaitingOnLimit).
	Paced []PaceWait `json:"paced,omitempty"`
	// RetryHistogram counts the run's finished items by retries needed.
	RetryHistogram []redrive.HistogramBucket `json:"retry_histogram"`
	// TopErrors are the most frequent failed-attempt errors, at most 8.
	TopErrors []redrive.ErrorCount `json:"top_errors"`
	// ErrorGroups are the run's failures grouped by cause (see
	// redrive.Fingerprint), ranked by dead items, at most 8.
	ErrorGroups []redrive.ErrorGroup `json:"error_groups"`
	// Output is the --output file, OutputItems the lines written to it.
	Output      string `json:"output,omitempty"`
	OutputItems int    `json:"output_items,omitempty"`
	// Commands are the commands to go on with, by name: "dlq_list" lists
	// the dead (and canceled) items; "dlq_redrive" redrives the dead ones,
	// and "dlq_redrive_<class>" those of one class; "dlq_redrive_canceled"
	// redrives the items an abort canceled; "work" is the command that works
	// redriven items (this run's command again). Only the commands that
	// apply are given.
	Commands map[string]string `json:"commands"`
	// Elapsed is the wall time of Execute.
	Elapsed Seconds `json:"elapsed_seconds"`
}

// ExitCode maps the summary to the exit status of `redrive run`.
func (s *Summary) ExitCode() int {
	if s.Interrupted {
		return ExitInterrupted
	}
	switch s.Status {
	case redrive.RunCompleted:
		return ExitCompleted
	case redrive.RunPartialSuccess:
		return ExitPartial
	case redrive.RunFailed:
		return ExitFailed
	case redrive.RunAborted:
		if s.FailureBudget.Exceeded {
			return ExitAborted
		}
		return ExitCanceled
	}
	return ExitError
}

func (s *Summary) fill(ctx context.Context, store redrive.Store, r redrive.Run, p *progress) error {
	c := r.Counts
	if !c.AddsUp() {
		return fmt.Errorf("runner: run %d: counts do not add up: total %d != %d pending + %d running + %d succeeded + %d dead + %d canceled + %d purged",
			r.ID, c.Total, c.Pending, c.Running, c.Succeeded, c.Dead, c.Canceled, c.Purged)
	}
	s.Status, s.Reason, s.Counts = r.Status, r.Reason, c
	s.SuccessRate = r.SuccessRate()
	o := r.Options
	s.SuccessThreshold, s.PartialThreshold = o.SuccessThreshold, o.PartialThreshold
	if s.SuccessThreshold == 0 {
		s.SuccessThreshold = redrive.DefaultSuccessThreshold
	}
	if s.PartialThreshold == 0 {
		s.PartialThreshold = redrive.DefaultPartialThreshold
	}
	s.FailureBudget = Budget{Configured: o.FailureBudget, MinItems: o.MinItems}
	if s.FailureBudget.MinItems == 0 {
		s.FailureBudget.MinItems = redrive.DefaultMinItems
	}
	if done := c.Succeeded + c.Dead; done > 0 {
		s.FailureBudget.DeadRate = float64(c.Dead) / float64(done)
	}
	s.FailureBudget.Exceeded = r.Status == redrive.RunAborted && strings.HasPrefix(r.Reason, "failure budget exceeded")
	if !s.FailureBudget.Exceeded {
		_, s.FailureBudget.Exceeded = redrive.BudgetExceeded(c, o)
	}
	_, _, s.Retries, s.RateLimitWaits = p.counts()
	var err error
	if lt, ok, err := redrive.RunLimitedTime(ctx, store, r, time.Now()); err != nil {
		return fmt.Errorf("runner: time waiting on the limit: %w", err)
	} else if ok {
		s.WaitingOnLimit = &lt
	}
	if s.RetryHistogram, err = store.RetryHistogram(ctx, r.ID); err != nil {
		return fmt.Errorf("runner: retry histogram: %w", err)
	}
	if s.TopErrors, err = store.TopErrors(ctx, redrive.ErrorFilter{RunID: r.ID, Limit: 5}); err != nil {
		return fmt.Errorf("runner: top errors: %w", err)
	}
	sort.SliceStable(s.TopErrors, func(i, j int) bool { return s.TopErrors[i].Count > s.TopErrors[j].Count })
	if len(s.TopErrors) > maxTopErrors {
		s.TopErrors = s.TopErrors[:maxTopErrors]
	}
	if s.ErrorGroups, err = redrive.ErrorGroups(ctx, store, redrive.ItemFilter{RunID: r.ID}); err != nil {
		return fmt.Errorf("runner: errors by cause: %w", err)
	}
	if len(s.ErrorGroups) > maxTopErrors {
		s.ErrorGroups = s.ErrorGroups[:maxTopErrors]
	}
	s.DeadByClass = map[string]int{}
	if c.Dead > 0 {
		for _, class := range []string{"final", "retryable", "rate_limited", redrive.ClassInvalidInput, redrive.ClassLost} {
			n, err := store.Count(ctx, redrive.ItemFilter{RunID: r.ID, States: []redrive.State{redrive.StateDead}, Class: class})
			if err != nil {
				return fmt.Errorf("runner: count dead items: %w", err)
			}
			if n > 0 {
				s.DeadByClass[class] = n
			}
		}
	}
	s.Commands = s.commands(c)
	return nil
}

// commands returns the commands to go on with (see Summary.Commands).
func (s *Summary) commands(c redrive.Counts) map[string]string {
	out := map[string]string{}
	if c.Dead+c.Canceled == 0 {
		return out
	}
	base := " --db " + shellQuote(s.DB) + " --run " + strconv.FormatInt(s.RunID, 10)
	list := "redrive dlq list" + base
	if c.Canceled > 0 {
		list += " --state dead,canceled"
	}
	out["dlq_list"] = list
	if c.Dead > 0 {
		out["dlq_redrive"] = "redrive dlq redrive" + base
		for class := range s.DeadByClass {
			out["dlq_redrive_"+class] = "redrive dlq redrive" + base + " --class " + class
		}
	}
	if c.Canceled > 0 {
		out["dlq_redrive_canceled"] = "redrive dlq redrive" + base + " --state canceled"
	}
	if s.Spec != "" && s.Input.File != "" {
		out["work"] = "redrive run " + shellQuote(s.Spec) + " --input " + shellQuote(s.Input.File) +
			" --db " + shellQuote(s.DB) + " --run-name " + shellQuote(s.RunName)
	}
	return out
}

// redriveHint says when to use the redrive command of a dead class.
var redriveHint = map[string]string{
	"retryable":               "transient failures: redrive once the dependency is healthy",
	"rate_limited":            "rate limited too long: redrive with --rate",
	redrive.ClassLost:         "workers vanished: redrive",
	"final":                   "fix the cause first; add --from-stage STAGE to redo an earlier stage's output",
	redrive.ClassInvalidInput: "bad input lines: fix the input rather than redrive",
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// maxTopErrors bounds the summary's top errors.
const maxTopErrors = 8

func pct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

// WriteText writes the summary for people.
func (s *Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	c := s.Counts
	status := string(s.Status)
	if s.Interrupted {
		status += " (interrupted: run the same command again to resume)"
	}
	fmt.Fprintf(&b, "run %d %q of pipeline %s: %s\n", s.RunID, s.RunName, s.Pipeline, status)
	if s.Reason != "" {
		fmt.Fprintf(&b, "  reason: %s\n", s.Reason)
	}
	in := s.Input
	fmt.Fprintf(&b, "input:   %s: %d items (%d invalid), %d added, %d already in the run\n", in.File, in.Items, in.Invalid, in.Added, in.Existing)
	fmt.Fprintf(&b, "items:   %d total = %d succeeded + %d dead + %d canceled", c.Total, c.Succeeded, c.Dead, c.Canceled)
	if c.Purged > 0 {
		fmt.Fprintf(&b, " + %d purged", c.Purged)
	}
	if c.Pending+c.Running > 0 {
		fmt.Fprintf(&b, " + %d pending + %d running", c.Pending, c.Running)
	}
	b.WriteString("\n")
	if len(s.DeadByClass) > 0 {
		classes := make([]string, 0, len(s.DeadByClass))
		for k := range s.DeadByClass {
			classes = append(classes, k)
		}
		sort.Slice(classes, func(i, j int) bool { return s.DeadByClass[classes[i]] > s.DeadByClass[classes[j]] })
		b.WriteString("dead:   ")
		for i, k := range classes {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %d %s", s.DeadByClass[k], k)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "success: %s (completed at >= %s, partial_success at >= %s)\n", pct(s.SuccessRate), pct(s.SuccessThreshold), pct(s.PartialThreshold))
	fb := s.FailureBudget
	if fb.Configured > 0 {
		verdict := "not exceeded"
		if fb.Exceeded {
			verdict = "EXCEEDED"
		}
		fmt.Fprintf(&b, "failure budget: %s dead allowed (judged after %d items); dead rate %s; %s\n", pct(fb.Configured), fb.MinItems, pct(fb.DeadRate), verdict)
	} else {
		fmt.Fprintf(&b, "failure budget: none configured; dead rate %s\n", pct(fb.DeadRate))
	}
	fmt.Fprintf(&b, "retries: %d scheduled, %d rate-limited waits (this invocation)\n", s.Retries, s.RateLimitWaits)
	if lt := s.WaitingOnLimit; lt != nil {
		fmt.Fprintf(&b, "waiting on the limit: %s\n", FormatLimitedTime(*lt))
	}
	for _, w := range s.Paced {
		fmt.Fprintf(&b, "waiting on the pace: %s: %d calls waited %.1fs before starting, %s per call on average\n",
			w.Dependency, w.Calls, float64(w.Waited), time.Duration(float64(w.Waited)/float64(max(w.Calls, 1))*float64(time.Second)).Round(time.Millisecond))
	}
	if len(s.RetryHistogram) > 0 {
		b.WriteString("retry histogram (retries: items):")
		for _, h := range s.RetryHistogram {
			fmt.Fprintf(&b, "  %d: %d", h.Retries, h.Items)
		}
		b.WriteString("\n")
	}
	if len(s.TopErrors) > 0 {
		b.WriteString("top errors:\n")
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  COUNT\tSTAGE\tCLASS\tERROR")
		for _, e := range s.TopErrors {
			msg := strings.ReplaceAll(e.Error, "\n", " ")
			if len(msg) > 100 {
				msg = msg[:100] + "…"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", e.Count, e.Stage, e.Class, msg)
		}
		tw.Flush()
	}
	s.writeErrorGroups(&b)
	if s.Output != "" {
		fmt.Fprintf(&b, "output:  %d succeeded items written to %s\n", s.OutputItems, s.Output)
	}
	if c.Dead+c.Canceled > 0 {
		s.writeCommands(&b)
	}
	fmt.Fprintf(&b, "elapsed: %.1fs\n", float64(s.Elapsed))
	_, err := io.WriteString(w, b.String())
	return err
}

// writeCommands writes the commands to go on with: list, redrive by class
// (most frequent first), the canceled items, and how to work what was
// redriven.
func (s *Summary) writeCommands(b *strings.Builder) {
	b.WriteString("dead letters:\n")
	fmt.Fprintf(b, "  list:     %s\n", s.Commands["dlq_list"])
	classes := make([]string, 0, len(s.DeadByClass))
	for k := range s.DeadByClass {
		classes = append(classes, k)
	}
	sort.Slice(classes, func(i, j int) bool {
		if s.DeadByClass[classes[i]] != s.DeadByClass[classes[j]] {
			return s.DeadByClass[classes[i]] > s.DeadByClass[classes[j]]
		}
		return classes[i] < classes[j]
	})
	for _, k := range classes {
		fmt.Fprintf(b, "  redrive:  %s   # %d %s", s.Commands["dlq_redrive_"+k], s.DeadByClass[k], k)
		if h := redriveHint[k]; h != "" {
			fmt.Fprintf(b, ": %s", h)
		}
		b.WriteString("\n")
	}
	if cmd, ok := s.Commands["dlq_redrive_canceled"]; ok {
		fmt.Fprintf(b, "  redrive:  %s   # %d canceled", cmd, s.Counts.Canceled)
		if s.Status == redrive.RunAborted {
			b.WriteString(" when the run was aborted")
		}
		b.WriteString("\n")
	}
	if cmd, ok := s.Commands["work"]; ok {
		fmt.Fprintf(b, "  then work the redriven items: %s\n", cmd)
	} else {
		b.WriteString("  redriven items wait for a worker: run the pipeline again, or see `redrive workers`\n")
	}
}

// FormatLimitedTime says how much of a run's time was spent waiting on rate limits:
// "12.3s of 60.0s (20.5%); llm_call 12.3s".
func FormatLimitedTime(lt redrive.LimitedTime) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%.1fs", lt.Total.Seconds())
	if lt.Elapsed > 0 {
		fmt.Fprintf(&b, " of %.1fs (%s)", lt.Elapsed.Seconds(), pct(min(lt.Total.Seconds()/lt.Elapsed.Seconds(), 1)))
	}
	stages := make([]string, 0, len(lt.ByStage))
	for st := range lt.ByStage {
		stages = append(stages, st)
	}
	sort.Strings(stages)
	for i, st := range stages {
		sep := ", "
		if i == 0 {
			sep = "; "
		}
		fmt.Fprintf(&b, "%s%s %.1fs", sep, st, lt.ByStage[st].Seconds())
	}
	return b.String()
}
