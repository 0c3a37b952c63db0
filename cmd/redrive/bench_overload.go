package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrive/redrive/internal/loadbench"
)

func newBenchOverloadCmd() *cobra.Command {
	var (
		o        loadbench.OverloadOptions
		variants string
		pgURL    string
		nginx    string
		trace    bool
	)
	cmd := &cobra.Command{
		Use:   "overload",
		Short: "Drive items through a token-bucket server on loopback and measure how redrive keeps to its limit",
		Long: `overload starts a token-bucket server on loopback (--rate requests/s, --burst,
429 with Retry-After: 1 or without it) that counts, per 100 ms window, the
requests it receives and the 429s it answers, and every TCP connection it
accepts. Each variant does --items items with --workers workers against a fresh
server and prints one row: items succeeded, dead and unfinished, the successful
rate as a fraction of the limit C, the share of 429s, the busiest 100 ms window
as a multiple of C, connections per worker and calls per item.

Variants: naive (32 goroutines that retry after a fixed 100 ms), engine (the Go
engine, a handler over retryhttp.Transport, SQLite), runner (redrive run, an
http stage with no options), postgres (--procs worker processes on PostgreSQL
sharing one run; postgres-rate: the same with the stage's rate limit set to
--rate, which the processes share through the database), their -no-ra forms
against 429s without Retry-After, and
nginx-naive, nginx-engine, nginx-runner against nginx limit_req (rate --rate,
burst --burst, nodelay, limit_req_status 429) in front of an unlimited backend.
By default every variant whose prerequisites exist runs: postgres needs
--pg-url (or REDRIVE_TEST_POSTGRES), nginx needs the nginx program on PATH or
--nginx.

--trace writes every window above 2 C to stderr with when its requests were
sent (the engine and postgres variants stamp each attempt's send time) and the
stalls of the process around it. --server-process runs the token-bucket server
in a process of its own, so that a stall of the process under test is not also
a stall of the server that counts.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if variants != "" {
				o.Variants = strings.Split(variants, ",")
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			o.Exe = exe
			if pgURL == "" {
				pgURL = os.Getenv("REDRIVE_TEST_POSTGRES")
			}
			o.PostgresURL = pgURL
			if nginx == "" {
				nginx, _ = exec.LookPath("nginx")
				if nginx == "" {
					if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
						nginx = "/usr/sbin/nginx"
					}
				}
			}
			o.Nginx = nginx
			o.Log = cmd.ErrOrStderr()
			if trace {
				o.Trace = cmd.ErrOrStderr()
			}
			start := time.Now().UTC()
			rs, err := loadbench.Overload(cmd.Context(), o)
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "overload benchmark, %s UTC, C = %g requests/s\n\n", start.Format("2006-01-02 15:04"), o.Rate)
			loadbench.WriteTable(w, rs)
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Items, "items", 3000, "items per variant")
	f.IntVar(&o.Workers, "workers", 32, "workers per variant (split across the postgres variant's processes)")
	f.Float64Var(&o.Rate, "rate", 50, "the server's limit C, requests per second")
	f.IntVar(&o.Burst, "burst", 50, "the token bucket's size")
	f.DurationVar(&o.Limit, "limit", 5*time.Minute, "time bound of one variant; items not done by then count as unfinished")
	f.IntVar(&o.Procs, "procs", 3, "worker processes of the postgres variant")
	f.StringVar(&variants, "variants", "", "comma-separated variants to run (default: all whose prerequisites exist): "+strings.Join(loadbench.AllVariants, ","))
	f.StringVar(&pgURL, "pg-url", "", "PostgreSQL URL of the postgres variant (default $REDRIVE_TEST_POSTGRES; a fresh schema is dropped afterwards)")
	f.StringVar(&nginx, "nginx", "", "the nginx program of the nginx variants (default: nginx on PATH or /usr/sbin/nginx)")
	f.BoolVar(&trace, "trace", false, "write every 100 ms window above 2 C, with its time relative to the 429s, when its requests were sent and the stalls around it, to stderr")
	f.BoolVar(&o.ServerProcess, "server-process", false, "run the token-bucket server in a process of its own, so that the stalls of the process under test are not the server's")
	cmd.AddCommand(newBenchOverloadWorkerCmd(), newBenchOverloadServerCmd())
	return cmd
}

// newBenchOverloadWorkerCmd is one worker process of the postgres variant, started by
// `redrive bench overload`.
func newBenchOverloadWorkerCmd() *cobra.Command {
	var o loadbench.WorkerOptions
	cmd := &cobra.Command{
		Use:    "worker",
		Short:  "One worker process of the overload benchmark's postgres variant",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := dbConfigFrom(cmd.Context())
			o.DB, o.Schema = c.URL, c.Schema
			if o.URL == "" || o.RunID <= 0 {
				return flagErrorf("url", "--url and --run are required")
			}
			return loadbench.Work(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.URL, "url", "", "the server's endpoint")
	cmd.Flags().IntVar(&o.Workers, "workers", 11, "workers of this process")
	cmd.Flags().Int64Var(&o.RunID, "run", 0, "the run to work until it ends")
	cmd.Flags().Float64Var(&o.Rate, "rate", 0, "the stage's configured rate limit, shared through the database (0: adaptive)")
	return cmd
}

// newBenchOverloadServerCmd is the token-bucket server of `redrive bench overload
// --server-process`, in a process of its own.
func newBenchOverloadServerCmd() *cobra.Command {
	var o loadbench.ServerOptions
	cmd := &cobra.Command{
		Use:    "server",
		Short:  "The overload benchmark's token-bucket server in a process of its own",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return loadbench.ServeProcess(cmd.Context(), o, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	cmd.Flags().Float64Var(&o.Rate, "rate", 50, "the limit C, requests per second")
	cmd.Flags().IntVar(&o.Burst, "burst", 50, "the token bucket's size")
	cmd.Flags().DurationVar(&o.RetryAfter, "retry-after", time.Second, "the Retry-After of each 429 (0: none)")
	return cmd
}
