package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/runner"
	"github.com/spf13/cobra"
)

// The `policy` command group: `policy preview` prints the retry schedule of a policy.
// The schedule itself is computed by previewRows and printed by printPreview, which the
// YAML runner reuses for `policy preview --from FILE --stage NAME`.

// maxPreviewRows bounds the rows previewRows returns (a policy may allow millions of attempts).
const maxPreviewRows = 1000

// previewRow is one retry of a schedule: the delay that precedes Attempt.
type previewRow struct {
	// Attempt is the attempt the delay precedes: 2 for the first retry.
	Attempt int
	// Nominal is the unjittered, capped delay; Low and High bound the jittered one.
	Nominal, Low, High time.Duration
	// CumNominal, CumLow and CumHigh are the totals of the delays up to this one: how long
	// after the first attempt (ignoring the attempts' own durations) this attempt starts.
	CumNominal, CumLow, CumHigh time.Duration
}

// previewRows returns the schedule of p: one row per retry, for attempts 2..p.Attempts()
// (at most maxPreviewRows rows). It is pure: it draws no random numbers.
func previewRows(p retry.Policy) []previewRow {
	n := min(p.Attempts()-1, maxPreviewRows)
	rows := make([]previewRow, 0, max(n, 0))
	var cn, cl, ch time.Duration
	for a := 1; a <= n; a++ {
		lo, hi := p.Bounds(a)
		nom := p.Nominal(a)
		cn, cl, ch = satAdd(cn, nom), satAdd(cl, lo), satAdd(ch, hi)
		rows = append(rows, previewRow{Attempt: a + 1, Nominal: nom, Low: lo, High: hi, CumNominal: cn, CumLow: cl, CumHigh: ch})
	}
	return rows
}

func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// jsonPreviewRow is the JSON form of a previewRow: durations as Go duration strings and
// as seconds.
type jsonPreviewRow struct {
	Attempt           int     `json:"attempt"`
	Nominal           string  `json:"nominal"`
	Low               string  `json:"low"`
	High              string  `json:"high"`
	Cumulative        string  `json:"cumulative"`
	CumulativeLow     string  `json:"cumulative_low"`
	CumulativeHigh    string  `json:"cumulative_high"`
	NominalSeconds    float64 `json:"nominal_seconds"`
	LowSeconds        float64 `json:"low_seconds"`
	HighSeconds       float64 `json:"high_seconds"`
	CumulativeSeconds float64 `json:"cumulative_seconds"`
	CumLowSeconds     float64 `json:"cumulative_low_seconds"`
	CumHighSeconds    float64 `json:"cumulative_high_seconds"`
}

// printPreview writes rows as a table, or as a JSON array when asJSON.
func printPreview(w io.Writer, rows []previewRow, asJSON bool) error {
	if asJSON {
		out := make([]jsonPreviewRow, len(rows))
		for i, r := range rows {
			out[i] = jsonPreviewRow{
				Attempt: r.Attempt,
				Nominal: r.Nominal.String(), Low: r.Low.String(), High: r.High.String(),
				Cumulative: r.CumNominal.String(), CumulativeLow: r.CumLow.String(), CumulativeHigh: r.CumHigh.String(),
				NominalSeconds: r.Nominal.Seconds(), LowSeconds: r.Low.Seconds(), HighSeconds: r.High.Seconds(),
				CumulativeSeconds: r.CumNominal.Seconds(), CumLowSeconds: r.CumLow.Seconds(), CumHighSeconds: r.CumHigh.Seconds(),
			}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return fmt.Errorf("write json: %w", err)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTEMPT\tDELAY\tLOW\tHIGH\tCUMULATIVE\tCUM LOW\tCUM HIGH")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Attempt, previewDur(r.Nominal), previewDur(r.Low), previewDur(r.High),
			previewDur(r.CumNominal), previewDur(r.CumLow), previewDur(r.CumHigh))
	}
	if len(rows) == 0 {
		fmt.Fprintln(tw, "(no retries: one attempt)")
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// previewDur formats d like time.Duration.String without trailing zero units
// ("2m0s" -> "2m", "1h0m0s" -> "1h"); the saturated maximum is "unbounded".
func previewDur(d time.Duration) string {
	if d == math.MaxInt64 {
		return "unbounded"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// describePolicy is a one-line summary of p with defaults applied.
func describePolicy(p retry.Policy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d attempts, %s backoff from %s", p.Attempts(), p.Backoff, previewDur(p.Nominal(1)))
	if p.Backoff == retry.BackoffExponential {
		m := p.Multiplier
		if m == 0 {
			m = retry.DefaultMultiplier
		}
		fmt.Fprintf(&b, " ×%s", strconv.FormatFloat(m, 'g', -1, 64))
	}
	switch p.MaxDelay {
	case retry.NoMaxDelay:
		b.WriteString(", no max delay")
	case 0:
		fmt.Fprintf(&b, ", max delay %s", previewDur(retry.DefaultMaxDelay))
	default:
		fmt.Fprintf(&b, ", max delay %s", previewDur(p.MaxDelay))
	}
	fmt.Fprintf(&b, ", jitter %s", p.JitterMode)
	if p.JitterMode == retry.JitterProportional {
		j := p.Jitter
		if j == 0 {
			j = retry.DefaultJitter
		}
		fmt.Fprintf(&b, " ±%s%%", strconv.FormatFloat(j*100, 'g', -1, 64))
	}
	return b.String()
}

// runPolicyPreview validates p and prints its schedule (with a summary line in table
// form). The runner's --from/--stage path calls it with the stage's policy.
func runPolicyPreview(w io.Writer, p retry.Policy, asJSON bool) error {
	if err := p.Validate(); err != nil {
		return usageErrorf("%w", err)
	}
	if !asJSON {
		if _, err := fmt.Fprintf(w, "policy: %s\n\n", describePolicy(p)); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	return printPreview(w, previewRows(p), asJSON)
}

// durValue is a duration flag that also accepts bare seconds ("3600") and "none"
// (retry.NoMaxDelay).
type durValue struct {
	d         *time.Duration
	allowNone bool
}

func (v durValue) String() string {
	if *v.d == retry.NoMaxDelay {
		return "none"
	}
	return v.d.String()
}

func (v durValue) Set(s string) error {
	s = strings.TrimSpace(s)
	if v.allowNone && strings.EqualFold(s, "none") {
		*v.d = retry.NoMaxDelay
		return nil
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if n < 0 || n > math.MaxInt64/float64(time.Second) {
			return fmt.Errorf("%q is out of range", s)
		}
		*v.d = time.Duration(n * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (e.g. 30s, 5m, 1h)", s)
	}
	*v.d = d
	return nil
}

func (v durValue) Type() string { return "duration" }

// policyFlags are the flags of `policy preview` that describe a policy.
type policyFlags struct {
	maxAttempts int
	backoff     string
	base        time.Duration
	multiplier  float64
	maxDelay    time.Duration
	jitter      float64
	jitterMode  string
	json        bool
}

func (f *policyFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "attempts including the first (0 = 3)")
	fl.StringVar(&f.backoff, "backoff", "exponential", "constant, linear or exponential")
	fl.Var(durValue{d: &f.base}, "base", "delay after the first failed attempt (0 = 1s)")
	fl.Float64Var(&f.multiplier, "multiplier", 0, "exponential growth factor, >= 1 (0 = 2)")
	f.maxDelay = retry.NoMaxDelay
	fl.Var(durValue{d: &f.maxDelay, allowNone: true}, "max-delay",
		"cap on one delay; none = uncapped (0 = 60s, the default of a policy written in Go or YAML)")
	fl.Float64Var(&f.jitter, "jitter", 0, "± fraction of proportional jitter, 0..1 (0 = 0.2)")
	fl.StringVar(&f.jitterMode, "jitter-mode", "proportional", "proportional, none, full, equal or decorrelated")
	fl.BoolVar(&f.json, "json", false, "print JSON instead of a table (for scripts)")
}

// apply returns base with the policy flags applied. Flags the user did not set leave
// base unchanged, except that without --from base is retry.Policy{MaxDelay: retry.NoMaxDelay}
// (see newPolicyPreviewCmd), so that every flag's default shows.
func (f *policyFlags) apply(cmd *cobra.Command, base retry.Policy) (retry.Policy, error) {
	p := base
	set := func(name string) bool { return cmd.Flags().Changed(name) }
	if set("max-attempts") {
		p.MaxAttempts = f.maxAttempts
	}
	if set("backoff") {
		b, err := retry.ParseBackoff(f.backoff)
		if err != nil {
			return p, usageErrorf("invalid --backoff: %w", err)
		}
		p.Backoff = b
	}
	if set("base") {
		p.BaseDelay = f.base
	}
	if set("multiplier") {
		p.Multiplier = f.multiplier
	}
	if set("max-delay") {
		p.MaxDelay = f.maxDelay
	}
	if set("jitter") {
		p.Jitter = f.jitter
	}
	if set("jitter-mode") {
		m, err := retry.ParseJitterMode(f.jitterMode)
		if err != nil {
			return p, usageErrorf("invalid --jitter-mode: %w", err)
		}
		p.JitterMode = m
	}
	return p, nil
}

// newPolicyCmd returns the `policy` command group with its `preview` subcommand.
func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Work with retry policies",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newPolicyPreviewCmd())
	return cmd
}

// newPolicyPreviewCmd returns `policy preview`.
func newPolicyPreviewCmd() *cobra.Command {
	var f policyFlags
	var from, stage string
	cmd := &cobra.Command{
		Use:   "preview",
		Short: "Print the retry schedule of a policy",
		Long: `Print the retry schedule of a policy: for every retry, the attempt it precedes,
the nominal delay, the lowest and highest delay after jitter, and the cumulative
times since the first attempt (attempt durations not included).

Without --max-delay the schedule is shown uncapped (--max-delay none); a policy
written in Go or YAML caps delays at 60s unless it sets its own maximum.`,
		Example: `  # ADR-0010: 4 attempts, 30s ×4, ±20%
  redrive policy preview --max-attempts 4 --base 30s --multiplier 4 --jitter 0.2
  # 8 attempts from 60s doubling, capped at an hour, no jitter
  redrive policy preview --max-attempts 8 --base 60s --max-delay 3600s --jitter-mode none --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			base := retry.Policy{MaxDelay: retry.NoMaxDelay}
			// With --from FILE --stage NAME, base is that stage's retry.Policy from a
			// pipeline file; flags set explicitly still override it.
			if from != "" || stage != "" {
				if from == "" || stage == "" {
					return usageErrorf("--from and --stage go together")
				}
				spec, err := runner.LoadFile(from)
				if err != nil {
					return exitWith(exitUsage, err)
				}
				if base, err = spec.StagePolicy(stage); err != nil {
					return exitWith(exitUsage, err)
				}
			}
			p, err := f.apply(cmd, base)
			if err != nil {
				return err
			}
			return runPolicyPreview(cmd.OutOrStdout(), p, f.json)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&from, "from", "", "pipeline YAML file to take the policy from (with --stage)")
	cmd.Flags().StringVar(&stage, "stage", "", "stage of the --from file whose policy to preview")
	return cmd
}
