package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redrive/redrive"
	"github.com/spf13/cobra"
)

// filterFlags are the item filters shared by `items list` and every `dlq`
// command: --run, --pipeline, --stage, --class, --error-contains, --since,
// --until, --limit and, where the command allows it, --state.
type filterFlags struct {
	run           int64
	pipeline      string
	stage         string
	key           string
	class         string
	errorContains string
	since, until  string
	limit         int
	afterID       int64
	states        []string
	// allowed lists the states --state may name; nil means all.
	allowed []redrive.State
	// defaultStates applies when --state is not given.
	defaultStates []redrive.State
}

// add registers the filter flags on cmd. limit is --limit's default and
// limitHelp says what 0 means for this command.
func (f *filterFlags) add(cmd *cobra.Command, limit int, limitHelp string, stateHelp string) {
	fl := cmd.Flags()
	fl.Int64Var(&f.run, "run", 0, "only items of this run ID")
	fl.StringVar(&f.pipeline, "pipeline", "", "only items of this pipeline")
	fl.StringVar(&f.stage, "stage", "", "only items at (or dead at) this stage")
	fl.StringVar(&f.key, "key", "", "only the item submitted with this key")
	fl.StringVar(&f.class, "class", "", "only items whose reason has this error class (final, retryable, rate_limited, lost, invalid_input, canceled)")
	fl.StringVar(&f.errorContains, "error-contains", "", "only items whose reason's error contains this text")
	fl.StringVar(&f.since, "since", "", "only items that reached their state at or after this time: RFC 3339 (2024-05-01T12:00:00Z) or a duration ago (24h, 90m, 7d)")
	fl.StringVar(&f.until, "until", "", "only items that reached their state before this time: RFC 3339 or a duration ago")
	fl.IntVar(&f.limit, "limit", limit, "at most this many items; "+limitHelp)
	fl.Int64Var(&f.afterID, "after-id", 0, "only items with a larger ID (the next page of a listing)")
	if stateHelp != "" {
		fl.StringSliceVar(&f.states, "state", nil, stateHelp)
	}
}

// filter turns the flags into an ItemFilter. Bad values are usage errors
// that name the flag and say what would be right.
func (f *filterFlags) filter(now time.Time) (redrive.ItemFilter, error) {
	out := redrive.ItemFilter{
		Pipeline:      f.pipeline,
		Stage:         f.stage,
		Key:           f.key,
		Class:         f.class,
		ErrorContains: f.errorContains,
		Limit:         f.limit,
	}
	if f.run < 0 {
		return out, flagErrorf("run", "%d is not a run ID: give a positive ID (see `redrive runs list`)", f.run)
	}
	out.RunID = f.run
	if f.afterID < 0 {
		return out, flagErrorf("after-id", "%d is negative: give the last ID of the previous page", f.afterID)
	}
	out.AfterID = f.afterID
	if f.limit < 0 {
		return out, flagErrorf("limit", "%d is negative: give 0 or more", f.limit)
	}
	var err error
	if out.Since, err = parseTimeFlag("since", f.since, now); err != nil {
		return out, err
	}
	if out.Until, err = parseTimeFlag("until", f.until, now); err != nil {
		return out, err
	}
	if !out.Since.IsZero() && !out.Until.IsZero() && out.Until.Before(out.Since) {
		return out, flagErrorf("until", "%s is before --since %s: swap them or widen the window", fmtTime(out.Until), fmtTime(out.Since))
	}
	for _, raw := range f.states {
		for _, s := range strings.Split(raw, ",") {
			st := redrive.State(strings.TrimSpace(s))
			if st == "" {
				continue
			}
			if !st.Valid() || (f.allowed != nil && !containsState(f.allowed, st)) {
				return out, flagErrorf("state", "unknown state %q: use one of %s", st, joinStates(f.allowedOrAll()))
			}
			if !containsState(out.States, st) {
				out.States = append(out.States, st)
			}
		}
	}
	if len(out.States) == 0 {
		out.States = append([]redrive.State(nil), f.defaultStates...)
	}
	if err := out.Validate(); err != nil {
		return out, usageErrorf("bad filter: %w", err)
	}
	return out, nil
}

func (f *filterFlags) allowedOrAll() []redrive.State {
	if f.allowed != nil {
		return f.allowed
	}
	return allStates
}

var allStates = []redrive.State{redrive.StatePending, redrive.StateRunning, redrive.StateSucceeded, redrive.StateDead, redrive.StateCanceled}

func containsState(ss []redrive.State, s redrive.State) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func joinStates(ss []redrive.State) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}

// parseTimeFlag parses --since or --until: empty is the zero time, else an
// RFC 3339 time, a date (2006-01-02, UTC midnight), or a positive duration
// ago (Go syntax such as 90m or 24h, or whole days such as 7d).
func parseTimeFlag(name, s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		n, err = strconv.Atoi(days)
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d <= 0 {
		return time.Time{}, flagErrorf(name, "%q is neither an RFC 3339 time (e.g. 2024-05-01T12:00:00Z) nor a positive duration ago (e.g. 90m, 24h, 7d)", s)
	}
	return now.Add(-d), nil
}

// parseID parses a positive integer ID.
func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%q is not a positive integer", s)
	}
	return id, nil
}

// listPage is how many items one store call fetches while paging.
const listPage = 500

// listItems lists the items selected by f, paging through the store; a zero
// f.Limit means all of them.
func listItems(ctx context.Context, s redrive.Store, f redrive.ItemFilter) ([]redrive.Item, error) {
	want := f.Limit
	var out []redrive.Item
	for {
		page := f
		page.Limit = listPage
		if want > 0 {
			page.Limit = min(listPage, want-len(out))
		}
		items, err := s.ListItems(ctx, page)
		if err != nil {
			return nil, fmt.Errorf("list items: %w", err)
		}
		out = append(out, items...)
		if len(items) < page.Limit || (want > 0 && len(out) >= want) || len(items) == 0 {
			return out, nil
		}
		f.AfterID = items[len(items)-1].ID
	}
}

// newItemsCmd returns `redrive items list|show`.
func newItemsCmd() *cobra.Command {
	cmd := newGroupCmd("items", "List items or show one with its attempt timeline")
	cmd.AddCommand(newItemsListCmd(), newItemsShowCmd())
	return cmd
}

func newItemsListCmd() *cobra.Command {
	var ff filterFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List items selected by filters, in ID order",
		Example: `  redrive items list --run 7 --state dead,canceled
  redrive items list --pipeline ocr --stage extract --since 24h --json`,
		Args: noArgs,
	}
	ff.add(cmd, 100, "0 means no limit", "only items in these states (pending, running, succeeded, dead, canceled; comma-separated or repeated)")
	asJSON := addJSONFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return printItems(cmd, &ff, *asJSON, writeItemsTable)
	}
	return cmd
}

// printItems lists the items that ff selects and prints them as JSON or, by
// default, with writeTable. `items list` and `dlq list` select and print
// items the same way and differ only in their table's columns.
func printItems(cmd *cobra.Command, ff *filterFlags, asJSON bool, writeTable func(io.Writer, []redrive.Item) error) error {
	f, err := ff.filter(time.Now())
	if err != nil {
		return err
	}
	return withStore(cmd, func(ctx context.Context, s redrive.Store) error {
		f, err := resolveFilter(ctx, s, f)
		if err != nil {
			return err
		}
		items, err := listItems(ctx, s, f)
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		if asJSON {
			if items == nil {
				items = []redrive.Item{}
			}
			if err := writeJSON(w, items); err != nil {
				return err
			}
			return noteMore(ctx, cmd.ErrOrStderr(), s, f, items)
		}
		if err := writeTable(w, items); err != nil {
			return err
		}
		if len(items) == 0 {
			fmt.Fprintln(w, "(no items match)")
		}
		return noteMore(ctx, w, s, f, items)
	})
}

// writeItemsTable prints items, one per row, with their reason if any.
func writeItemsTable(w io.Writer, items []redrive.Item) error {
	t := newTable(w, "ID", "RUN", "PIPELINE", "KEY", "STAGE", "STATE", "ATTEMPT", "UPDATED", "CLASS", "ERROR")
	for _, it := range items {
		class, msg := "", ""
		if it.Reason != nil {
			class, msg = it.Reason.Class, it.Reason.Error
		}
		t.row(it.ID, it.RunID, it.Pipeline, truncate(it.Key, 24), it.Stage, it.State, it.Attempt, fmtTime(it.UpdatedAt), class, truncate(msg, 60))
	}
	return t.flush()
}

func newItemsShowCmd() *cobra.Command {
	var (
		key, pipeline string
		run           int64
	)
	cmd := &cobra.Command{
		Use:   "show ID | --key KEY",
		Short: "Show one item and its attempt timeline",
		Long: `Show one item and its attempt timeline: for each attempt its stage, number,
outcome, error class and message, start time, duration, the delay chosen
after it before the next attempt, and the hash of the stage configuration
that made it (CONFIG: the attempts after a policy change show a new hash).

The item is given by its ID, or by --key: the key it was submitted with, or
the id of its input line (redrive run and redrive enqueue store it as
"<run>/<id>"; the id alone is found in its run). --run and --pipeline narrow
the search when an id is in several runs.`,
		Example: `  redrive items show 42
  redrive items show --key doc-00012
  redrive items show --key doc-00012 --run 3`,
		Args: func(cmd *cobra.Command, args []string) error {
			if key != "" || cmd.Flags().Changed("key") {
				if len(args) > 0 {
					return usageErrorf("%s takes an item ID or --key, not both", cmd.CommandPath())
				}
				return nil
			}
			if cmd.Flags().Changed("run") || cmd.Flags().Changed("pipeline") {
				return usageErrorf("--run and --pipeline narrow --key: give --key, or an item ID alone")
			}
			return oneID("item")(cmd, args)
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the item's key, or its input line's id")
	cmd.Flags().Int64Var(&run, "run", 0, "with --key: look in this run only")
	cmd.Flags().StringVar(&pipeline, "pipeline", "", "with --key: look in this pipeline only")
	asJSON := addJSONFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 1 {
			id, _ := parseID(args[0])
			return withStore(cmd, func(_ context.Context, s redrive.Store) error {
				return showItem(cmd, s, id, *asJSON, nil)
			})
		}
		if key == "" {
			return flagErrorf("key", "empty key: give the item's key or its input line's id")
		}
		if run < 0 {
			return flagErrorf("run", "%d is not a run ID: give a positive ID (see `redrive runs list`)", run)
		}
		return withStore(cmd, func(ctx context.Context, s redrive.Store) error {
			id, err := itemByKey(ctx, s, redrive.ItemFilter{RunID: run, Pipeline: pipeline, Key: key})
			if err != nil {
				return err
			}
			return showItem(cmd, s, id, *asJSON, nil)
		})
	}
	return cmd
}

// itemByKey returns the ID of the one item that f's key (as the user gave
// it) names, or an error that says why there is none or which ones match.
func itemByKey(ctx context.Context, s redrive.Store, f redrive.ItemFilter) (int64, error) {
	f, err := resolveFilter(ctx, s, f)
	if err != nil {
		return 0, err
	}
	f.Limit = 10
	items, err := s.ListItems(ctx, f)
	if err != nil {
		return 0, fmt.Errorf("find key %q: %w", f.Key, err)
	}
	switch len(items) {
	case 0:
		return 0, exitWith(exitNotFound, fmt.Errorf("no item has key %q", f.Key))
	case 1:
		return items[0].ID, nil
	}
	names := make([]string, len(items))
	for i, it := range items {
		names[i] = fmt.Sprintf("item %d of pipeline %s", it.ID, it.Pipeline)
	}
	return 0, flagErrorf("key", "%q is the key of several items (%s): add --pipeline", f.Key, strings.Join(names, ", "))
}

// itemDetail is the JSON form of `items show` and `dlq show`.
type itemDetail struct {
	Item     redrive.Item      `json:"item"`
	Attempts []redrive.Attempt `json:"attempts"`
	// Actions are the audit log's actions that changed the item.
	Actions []redrive.AuditAction `json:"actions"`
}

// showItem prints item id with its attempts. When states is not nil the
// item must be in one of them, else it counts as not found.
func showItem(cmd *cobra.Command, s redrive.Store, id int64, asJSON bool, states []redrive.State) error {
	ctx := cmd.Context()
	it, err := s.GetItem(ctx, id)
	if err != nil {
		return notFound(err, fmt.Sprintf("item %d", id), "see `redrive items list`")
	}
	if states != nil && !containsState(states, it.State) {
		return exitWith(exitNotFound, fmt.Errorf("item %d is not in the dead-letter queue (its state is %s): see `redrive items show %d`", id, it.State, id))
	}
	atts, err := s.Attempts(ctx, id)
	if err != nil {
		return fmt.Errorf("attempts of item %d: %w", id, err)
	}
	if atts == nil {
		atts = []redrive.Attempt{}
	}
	acts, err := s.ItemActions(ctx, id)
	if err != nil {
		return fmt.Errorf("actions on item %d: %w", id, err)
	}
	if acts == nil {
		acts = []redrive.AuditAction{}
	}
	w := cmd.OutOrStdout()
	if asJSON {
		return writeJSON(w, itemDetail{Item: it, Attempts: atts, Actions: acts})
	}
	pairs := []any{
		"Item", it.ID,
		"Run", it.RunID,
		"Pipeline", it.Pipeline,
		"Key", cell(it.Key),
		"State", it.State,
		"Stage", fmt.Sprintf("%s (#%d)", it.Stage, it.StageIndex),
		"Attempt", it.Attempt,
		"Enqueued", fmtTime(it.EnqueuedAt),
		"Updated", fmtTime(it.UpdatedAt),
	}
	if it.State == redrive.StatePending {
		pairs = append(pairs, "Next attempt", fmtTime(it.NextAt))
	}
	if it.State == redrive.StateRunning {
		pairs = append(pairs, "Lease", fmt.Sprintf("%s until %s", cell(it.LeaseOwner), fmtTime(it.LeaseExpiresAt)))
		if !it.AttemptStartedAt.IsZero() {
			pairs = append(pairs, "Attempt started", fmtTime(it.AttemptStartedAt))
		}
	}
	if it.RateLimitWaits > 0 {
		pairs = append(pairs, "Rate-limit waits", it.RateLimitWaits)
	}
	if it.FailedAttempts > 0 {
		pairs = append(pairs, "Failed attempts", fmt.Sprintf("%d over all stages", it.FailedAttempts))
	}
	if it.LeaseLosses > 0 {
		pairs = append(pairs, "Lease losses", fmt.Sprintf("%d, returned without an attempt: its process died before the attempt's start was recorded", it.LeaseLosses))
	}
	if r := it.Reason; r != nil {
		pairs = append(pairs, "Reason", fmt.Sprintf("%s at stage %s after %s, %s", r.Class, r.Stage, plural(r.Attempts, "attempt"), fmtTime(r.At)),
			"Error", cell(r.Error))
	}
	if err := kv(w, pairs...); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nAttempts (%d):\n", len(atts))
	if len(atts) == 0 {
		fmt.Fprintln(w, noAttempts(it))
	} else if err := writeAttempts(w, atts); err != nil {
		return err
	}
	if len(acts) > 0 {
		// The audit log's actions that changed the item: who redrove,
		// canceled or retried it, and when.
		fmt.Fprintf(w, "\nActions (%d):\n", len(acts))
		t := newTable(w, "AT", "WHO", "ACTION", "ITEMS", "HOW")
		for _, a := range acts {
			t.row(fmtTime(a.At), a.Actor, a.Kind, a.Count, cell(a.Detail))
		}
		return t.flush()
	}
	return nil
}

// writeAttempts writes an item's attempts as a table.
func writeAttempts(w io.Writer, atts []redrive.Attempt) error {
	t := newTable(w, "#", "STAGE", "ATTEMPT", "OUTCOME", "CLASS", "STARTED", "DURATION", "DELAY AFTER", "CONFIG", "ERROR")
	for i, a := range atts {
		dur := time.Duration(0)
		if !a.FinishedAt.IsZero() && !a.StartedAt.IsZero() {
			dur = a.FinishedAt.Sub(a.StartedAt)
		}
		t.row(i+1, a.Stage, a.Number, a.Outcome, a.Class, fmtTime(a.StartedAt), fmtDur(dur), fmtDur(a.Delay), cell(a.ConfigHash), a.Error)
	}
	return t.flush()
}

// plural returns "1 attempt" or "n attempts".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// noAttempts says why an item has no attempts: whether one is still to come.
func noAttempts(it redrive.Item) string {
	switch {
	case it.State == redrive.StatePending || it.State == redrive.StateRunning:
		return "(none yet)"
	case it.Reason != nil && it.Reason.Class == redrive.ClassInvalidInput:
		return "(none: its input could not be read, so it never ran; a redrive will not help, fix the input)"
	case it.State == redrive.StateCanceled:
		return "(none: it was canceled before it ran; `redrive dlq redrive --state canceled` runs it)"
	}
	return "(none: it never ran)"
}
