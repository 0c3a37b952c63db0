package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrive/redrive/internal/loadbench"
)

func newBenchOutageCmd() *cobra.Command {
	var (
		o     loadbench.OutageOptions
		m     loadbench.MetaOptions
		parts string
		trace bool
	)
	cmd := &cobra.Command{
		Use:   "outage",
		Short: "Measure calls per logical request, dead items and recovery through a dependency outage",
		Long: `outage runs three parts against servers on loopback.

stream: a steady stream of --stream-rate logical requests/s for --before, then
--outage of 503s without Retry-After, then --after; per client (retry.Do at its
zero Policy, retry.Do with a shared default Budget, a zero retryhttp.Transport,
the naive loop that retries every 100 ms), the calls the server received during
the outage per logical request issued during it.

drain: the Go engine (a handler over a zero retryhttp.Transport, SQLite) and
the naive loop drain --items items with --workers workers through the same
outage, against a server that takes --latency per request: items dead, calls
per item called during the outage, and how soon after the outage the
successful rate is back to 90 % of what it was before.

metastable: a server with a capacity (4 slots of 40 ms: 100 requests/s) and a
queue of 300 that does the work of requests whose clients gave up; 60 logical
requests/s with a 1 s timeout per call and a spike of 200/s for 2 s. Per
client, the share of logical requests that succeeded before the spike and in
the last 8 s of 30.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sel := strings.Split(parts, ",")
			for _, p := range sel {
				if !slices.Contains([]string{"stream", "drain", "metastable"}, p) {
					return flagErrorf("parts", "unknown part %q (want stream, drain, metastable)", p)
				}
			}
			o.Log, m.Log = cmd.ErrOrStderr(), cmd.ErrOrStderr()
			if trace {
				o.Trace = cmd.ErrOrStderr()
			}
			ctx, w := cmd.Context(), cmd.OutOrStdout()
			fmt.Fprintf(w, "outage benchmark, %s UTC, outage %s after %s\n", time.Now().UTC().Format("2006-01-02 15:04"), o.Outage, o.Before)
			if slices.Contains(sel, "stream") {
				rs, err := loadbench.Stream(ctx, o)
				fmt.Fprintf(w, "\nstream of %g logical requests/s:\n\n", o.StreamRate)
				fmt.Fprintln(w, "| client | logical requests | succeeded | failed | issued in the outage | calls in the outage | calls per logical request |")
				fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
				for _, r := range rs {
					fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %.2f |\n", r.Name, r.Requests, r.Succeeded, r.Failed, r.OutageRequests, r.OutageCalls, r.CallsPerRequest())
				}
				if err != nil {
					return err
				}
			}
			if slices.Contains(sel, "drain") {
				rs, err := loadbench.Drain(ctx, o)
				fmt.Fprintf(w, "\ndrain of %d items, %d workers:\n\n", o.Items, o.Workers)
				fmt.Fprintln(w, "| client | succeeded | dead | unfinished | items called in the outage | calls in the outage | calls per item | rate before | back to 90 % after | time |")
				fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
				for _, r := range rs {
					rec := "never"
					if r.Recovery >= 0 {
						rec = fmt.Sprintf("%.1f s", r.Recovery.Seconds())
					}
					fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %.2f | %.0f/s | %s | %.1f s |\n", r.Name, r.Succeeded, r.Dead, r.Unfinished, r.OutageItems, r.OutageCalls, r.CallsPerItem(), r.Rate, rec, r.Elapsed.Seconds())
				}
				if err != nil {
					return err
				}
			}
			if slices.Contains(sel, "metastable") {
				rs, err := loadbench.Metastable(ctx, m)
				fmt.Fprintf(w, "\nmetastability (capacity 100/s, 60/s with a spike of 200/s at 3-5 s, 1 s timeout per call):\n\n")
				fmt.Fprintln(w, "| client | logical requests | calls | succeeded before the spike | succeeded in the last 8 s | recovered | per second |")
				fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
				for _, r := range rs {
					var ps []string
					for _, s := range r.PerSecond {
						ps = append(ps, fmt.Sprintf("%.0f", 100*s))
					}
					fmt.Fprintf(w, "| %s | %d | %d | %.0f %% | %.0f %% | %v | %s |\n", r.Name, r.Requests, r.Calls, 100*r.Before, 100*r.After, r.Recovered(), strings.Join(ps, " "))
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&parts, "parts", "stream,drain,metastable", "comma-separated parts to run: stream, drain, metastable")
	f.DurationVar(&o.Before, "before", 3*time.Second, "healthy time before the outage")
	f.DurationVar(&o.Outage, "outage", 10*time.Second, "length of the outage (503 without Retry-After)")
	f.DurationVar(&o.After, "after", 3*time.Second, "the stream's healthy time after the outage")
	f.Float64Var(&o.StreamRate, "stream-rate", 50, "the stream's logical requests per second")
	f.IntVar(&o.Items, "items", 3000, "items drained through the outage")
	f.IntVar(&o.Workers, "workers", 32, "workers draining the items")
	f.DurationVar(&o.Latency, "latency", 200*time.Millisecond, "the drained server's time per successful request")
	f.DurationVar(&o.Limit, "limit", 3*time.Minute, "time bound of one variant")
	f.BoolVar(&trace, "trace", false, "write the drained engine's timeline (breaker changes, attempts per second, the server's windows around the recovery) to stderr")
	f.DurationVar(&m.Duration, "meta-duration", 30*time.Second, "how long the metastability scenario issues requests")
	return cmd
}
