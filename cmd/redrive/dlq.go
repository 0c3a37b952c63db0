package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// The dead-letter queue commands. They all take the same filters (see
// filterFlags) and select dead items by default, or canceled ones with
// --state canceled. The work is done by the package-level functions
// redrive.Redrive, redrive.Purge and redrive.Export.

const dlqStateHelp = "which items: dead (default) or canceled, or both (comma-separated)"

// newDLQFilter returns filter flags for a DLQ command.
func newDLQFilter() *filterFlags {
	return &filterFlags{
		allowed:       []redrive.State{redrive.StateDead, redrive.StateCanceled},
		defaultStates: []redrive.State{redrive.StateDead},
	}
}

// newDLQCmd returns `redrive dlq list|show|export|redrive|purge`.
func newDLQCmd() *cobra.Command {
	cmd := newGroupCmd("dlq", "Work the dead-letter queue: list, show, export, redrive, purge")
	cmd.Long = `Work the dead-letter queue: the items that are dead (or canceled), each with a
reason: the stage that failed, the error class and message, the attempts made
and when.

Every dlq command takes the same filters: --run, --pipeline, --stage, --class,
--error-contains, --since, --until (RFC 3339 or a duration ago such as 24h or
7d), --limit and --state (dead by default, or canceled).

redrive and purge change state: they print the number of items they would
change with --dry-run, ask for confirmation on a terminal, and need --yes
otherwise (exit code 4 without it). They are recorded in the audit log, as
actions through the API and the console are, under --actor (default: the
OS user); a redrive links the items it changed to its entry.`
	cmd.AddCommand(newDLQListCmd(), newDLQShowCmd(), newDLQExportCmd(), newDLQRedriveCmd(), newDLQPurgeCmd())
	return cmd
}

func newDLQListCmd() *cobra.Command {
	ff := newDLQFilter()
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List dead items with their reasons",
		Example: "  redrive dlq list --pipeline ocr --class final --since 24h",
		Args:    noArgs,
	}
	ff.add(cmd, 100, "0 means no limit", dlqStateHelp)
	asJSON := addJSONFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return printItems(cmd, ff, *asJSON, writeDLQTable)
	}
	return cmd
}

// writeDLQTable prints dead items, one per row, with their reason.
func writeDLQTable(w io.Writer, items []redrive.Item) error {
	t := newTable(w, "ID", "RUN", "PIPELINE", "KEY", "STATE", "STAGE", "CLASS", "ATTEMPTS", "AT", "ERROR")
	for _, it := range items {
		r := it.Reason
		if r == nil {
			r = &redrive.Reason{Stage: it.Stage}
		}
		t.row(it.ID, it.RunID, it.Pipeline, truncate(it.Key, 24), it.State, r.Stage, r.Class, r.Attempts, fmtTime(r.At), truncate(r.Error, 60))
	}
	return t.flush()
}

func newDLQShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a dead item: its reason and attempt timeline",
		Args:  oneID("item"),
	}
	asJSON := addJSONFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, _ := parseID(args[0])
		return withStore(cmd, func(_ context.Context, s redrive.Store) error {
			return showItem(cmd, s, id, *asJSON, []redrive.State{redrive.StateDead, redrive.StateCanceled})
		})
	}
	return cmd
}

func newDLQExportCmd() *cobra.Command {
	ff := newDLQFilter()
	var out string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Export dead items with reasons and attempts as JSON lines",
		Long: `Export the selected dead items as JSON lines, one object per item:
{"item": {...with its reason...}, "attempts": [...]}. The lines go to stdout,
or to --out FILE (written to a temporary file and renamed into place, so an
interrupted export leaves no partial file). The count goes to stderr.`,
		Example: "  redrive dlq export --run 7 --out run7-dead.jsonl",
		Args:    noArgs,
	}
	ff.add(cmd, 0, "0 means all", dlqStateHelp)
	cmd.Flags().StringVarP(&out, "out", "o", "", "write to this file instead of stdout")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := ff.filter(time.Now())
		if err != nil {
			return err
		}
		if cmd.Flags().Changed("out") && out == "" {
			return flagErrorf("out", "empty file name: give a path, or leave --out out for stdout")
		}
		return withStore(cmd, func(ctx context.Context, s redrive.Store) error {
			if f, err = resolveFilter(ctx, s, f); err != nil {
				return err
			}
			if out == "" || out == "-" {
				n, err := redrive.Export(ctx, s, f, cmd.OutOrStdout())
				if err != nil {
					return dlqErr("export", err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "exported %s\n", nItems(n))
				return nil
			}
			tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*.tmp")
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			n, err := redrive.Export(ctx, s, f, tmp)
			if cerr := tmp.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("export: %w", cerr)
			}
			if err == nil {
				err = os.Rename(tmp.Name(), out)
			}
			if err != nil {
				os.Remove(tmp.Name())
				return dlqErr("export", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "exported %s to %s\n", nItems(n), out)
			return nil
		})
	}
	return cmd
}

// fromStageErr is dlqErr for a redrive, naming --from-stage when the items
// did not reach it.
func fromStageErr(err error) error {
	var fe *redrive.FilterError
	if errors.As(err, &fe) {
		return flagErrorf(strings.ReplaceAll(fe.Field, "_", "-"), "%s", fe.Msg)
	}
	return dlqErr("redrive", err)
}

// dlqErr wraps an error of a DLQ function; a bad filter is a usage error.
func dlqErr(op string, err error) error {
	if errors.Is(err, redrive.ErrBadFilter) {
		return exitWith(exitUsage, fmt.Errorf("%s: %w", op, err))
	}
	return fmt.Errorf("%s: %w", op, err)
}

// changeResult is the JSON form of redrive and purge.
type changeResult struct {
	Action string `json:"action"`
	DryRun bool   `json:"dry_run"`
	Count  int    `json:"count"`
	// Warning says when no live worker serves the pipeline of redriven
	// items: they stay pending until one runs.
	Warning string `json:"warning,omitempty"`
}

// describeFilter says in words which items f selects.
func describeFilter(f redrive.ItemFilter) string {
	parts := []string{joinStates(f.States) + " items"}
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, name+" "+v)
		}
	}
	if f.RunID > 0 {
		add("run", fmt.Sprint(f.RunID))
	}
	add("pipeline", f.Pipeline)
	add("stage", f.Stage)
	add("class", f.Class)
	if f.ErrorContains != "" {
		add("error containing", fmt.Sprintf("%q", f.ErrorContains))
	}
	if !f.Since.IsZero() {
		add("since", fmtTime(f.Since))
	}
	if !f.Until.IsZero() {
		add("until", fmtTime(f.Until))
	}
	if f.Limit > 0 {
		add("at most", fmt.Sprint(f.Limit))
	}
	return strings.Join(parts, ", ")
}

// changeFlags are the flags of the commands that change state.
type changeFlags struct {
	dryRun, yes, asJSON bool
}

func (c *changeFlags) add(cmd *cobra.Command, verb string) {
	cmd.Flags().BoolVar(&c.dryRun, "dry-run", false, "print how many items would be "+verb+" and change nothing")
	cmd.Flags().BoolVarP(&c.yes, "yes", "y", false, "do not ask for confirmation (required when stdin is not a terminal)")
	cmd.Flags().BoolVar(&c.asJSON, "json", false, `print {"action","dry_run","count"} as JSON`)
}

// confirm asks on a terminal whether to go on with n items; without a
// terminal it returns the confirmation-required error (exit code 4) unless
// --yes was given.
func confirm(cmd *cobra.Command, c changeFlags, verb string, n int, f redrive.ItemFilter) error {
	if c.yes {
		return nil
	}
	in := cmd.InOrStdin()
	file, ok := in.(*os.File)
	if !ok || !term.IsTerminal(int(file.Fd())) {
		return exitWith(exitConfirm, fmt.Errorf("confirmation required: %s would be %s (%s); rerun with --yes to go ahead, or --dry-run to only count them", nItems(n), verb, describeFilter(f)))
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s will be %s (%s). Continue? [y/N] ", nItems(n), verb, describeFilter(f))
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read confirmation: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return exitWith(exitConfirm, fmt.Errorf("not confirmed: nothing was %s", verb))
}

// reportChange prints the outcome of a redrive or purge.
func reportChange(cmd *cobra.Command, c changeFlags, action, verb string, n int, f redrive.ItemFilter) error {
	return reportChangeWith(cmd, c, changeResult{Action: action, DryRun: c.dryRun, Count: n}, verb, f)
}

// reportChangeWith prints res, a redrive's or purge's outcome.
func reportChangeWith(cmd *cobra.Command, c changeFlags, res changeResult, verb string, f redrive.ItemFilter) error {
	n := res.Count
	if c.asJSON {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	if n == 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "no items match (%s): nothing %s\n", describeFilter(f), verb)
		return nil
	}
	if c.dryRun {
		fmt.Fprintf(cmd.OutOrStdout(), "dry run: %s would be %s (%s)\n", nItems(n), verb, describeFilter(f))
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s (%s)\n", verb, nItems(n), describeFilter(f))
	return nil
}

func newDLQRedriveCmd() *cobra.Command {
	ff := newDLQFilter()
	var (
		c         changeFlags
		rate      float64
		fromStage string
	)
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Send dead (or canceled) items through again from the stage that failed",
		Long: `Send the selected dead items (or canceled ones with --state canceled) back to
pending at the stage that stopped them, with a fresh attempt counter; their
attempt history is kept and their runs reopen. --rate spreads them out so a
dependency that just recovered is not hit by the whole backlog at once.

--from-stage STAGE restarts them at an earlier stage instead, with the input
that stage had: when a stage failed on an earlier stage's bad output (a
model's malformed answer), redriving the failed stage would fail again. Every
selected item must have reached STAGE.

Redriven items are worked by whatever serves their pipeline: a running
` + "`redrive run`" + `, ` + "`redrive serve --pipeline`" + ` or your program. The command
says so when no live worker serves it (see ` + "`redrive workers`" + `).`,
		Example: `  redrive dlq redrive --run 7 --class retryable --dry-run
  redrive dlq redrive --run 7 --class retryable --rate 20 --yes
  redrive dlq redrive --run 7 --stage validate --from-stage llm_call --yes`,
		Args: noArgs,
	}
	ff.add(cmd, 0, "0 means all", dlqStateHelp)
	c.add(cmd, "redriven")
	actor := addActorFlag(cmd)
	cmd.Flags().Float64Var(&rate, "rate", 0, "items per second to make due (0: all at once)")
	cmd.Flags().StringVar(&fromStage, "from-stage", "", "restart the items at this earlier stage, with the input it had (default: the stage that stopped each item)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		now := time.Now()
		f, err := ff.filter(now)
		if err != nil {
			return err
		}
		if rate < 0 {
			return flagErrorf("rate", "%g is negative: give items per second, or 0 for all at once", rate)
		}
		if cmd.Flags().Changed("from-stage") && fromStage == "" {
			return flagErrorf("from-stage", "empty stage name: name a stage, or leave --from-stage out")
		}
		who, err := actorOf(cmd, *actor)
		if err != nil {
			return err
		}
		return withStore(cmd, func(ctx context.Context, s redrive.Store) error {
			if f, err = resolveFilter(ctx, s, f); err != nil {
				return err
			}
			n, err := redrive.Redrive(ctx, s, f, redrive.RedriveOptions{DryRun: true, FromStage: fromStage})
			if err != nil {
				return fromStageErr(err)
			}
			if c.dryRun || n == 0 {
				return reportChange(cmd, c, "redrive", "redriven", n, f)
			}
			if err := confirm(cmd, c, "redriven", n, f); err != nil {
				return err
			}
			// The items are marked before they move: afterwards the
			// filter no longer selects them.
			detail := web.RedriveDetail(rate, fromStage)
			act, err := beginChange(ctx, s, who, "redrive", f, n, detail, &f)
			if err != nil {
				return err
			}
			n, err = redrive.Redrive(ctx, s, f, redrive.RedriveOptions{Rate: rate, Now: time.Now(), FromStage: fromStage})
			if aerr := act.end(ctx, "redrive", n, detail, err); aerr != nil {
				return aerr
			}
			if err != nil {
				return fromStageErr(err)
			}
			res := changeResult{Action: "redrive", Count: n}
			var warnings strings.Builder
			if n > 0 {
				if err := warnNoWorker(ctx, &warnings, s, f); err != nil {
					return fmt.Errorf("redrive: look for workers: %w", err)
				}
				res.Warning = strings.TrimSpace(warnings.String())
			}
			if err := reportChangeWith(cmd, c, res, "redriven", f); err != nil {
				return err
			}
			if !c.asJSON {
				fmt.Fprint(cmd.OutOrStdout(), warnings.String())
			}
			return nil
		})
	}
	return cmd
}

func newDLQPurgeCmd() *cobra.Command {
	ff := newDLQFilter()
	var c changeFlags
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete dead (or canceled) items and their attempts",
		Long: `Delete the selected dead items (canceled ones too with --state canceled) with
their attempt history. This cannot be undone: export them first
(redrive dlq export) if you may need them.`,
		Example: "  redrive dlq purge --class invalid_input --until 30d --yes",
		Args:    noArgs,
	}
	ff.add(cmd, 0, "0 means all", dlqStateHelp)
	c.add(cmd, "purged")
	actor := addActorFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := ff.filter(time.Now())
		if err != nil {
			return err
		}
		who, err := actorOf(cmd, *actor)
		if err != nil {
			return err
		}
		return withStore(cmd, func(ctx context.Context, s redrive.Store) error {
			if f, err = resolveFilter(ctx, s, f); err != nil {
				return err
			}
			n, err := redrive.Purge(ctx, s, f, true)
			if err != nil {
				return dlqErr("purge", err)
			}
			if c.dryRun || n == 0 {
				return reportChange(cmd, c, "purge", "purged", n, f)
			}
			if err := confirm(cmd, c, "purged", n, f); err != nil {
				return err
			}
			// No marks: a purged item's marks go with it.
			act, err := beginChange(ctx, s, who, "purge", f, n, "", nil)
			if err != nil {
				return err
			}
			n, err = redrive.Purge(ctx, s, f, false)
			if aerr := act.end(ctx, "purge", n, "", err); aerr != nil {
				return aerr
			}
			if err != nil {
				return dlqErr("purge", err)
			}
			return reportChange(cmd, c, "purge", "purged", n, f)
		})
	}
	return cmd
}
