package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redrive/redrive"
	"github.com/spf13/cobra"
)

// newWorkersCmd returns `redrive workers`: the started clients recorded in
// the database, so that an operator can tell whether anything works a
// pipeline's items.
func newWorkersCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List the worker processes recorded in the database, live or stale",
		Long: `List the worker processes (started redrive clients: redrive run, redrive serve
--pipeline, or a program's Client) recorded in the database. Each refreshes its
row every heartbeat interval and removes it when it stops; a row whose process
stopped heartbeating (killed, crashed, cut off) is shown as stale once three
intervals have passed.`,
		Args: noArgs,
	}
	asJSON := addJSONFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return withStore(cmd, func(ctx context.Context, s redrive.Store) error {
			ws, err := s.ListWorkers(ctx)
			if err != nil {
				return fmt.Errorf("list workers: %w", err)
			}
			w := cmd.OutOrStdout()
			if *asJSON {
				if ws == nil {
					ws = []redrive.Worker{}
				}
				return writeJSON(w, ws)
			}
			now := time.Now()
			t := newTable(w, "OWNER", "HOST", "PID", "PIPELINES", "STARTED", "LAST SEEN", "STATUS")
			for _, wk := range ws {
				status := "live"
				if !wk.Live(now) {
					status = "stale"
				}
				t.row(wk.Owner, wk.Host, wk.PID, strings.Join(wk.Pipelines, ","), fmtTime(wk.StartedAt), fmtTime(wk.LastSeen), status)
			}
			if err := t.flush(); err != nil {
				return err
			}
			if len(ws) == 0 {
				fmt.Fprintln(w, "(no workers: nothing works the pending items)")
			}
			return nil
		})
	}
	return cmd
}
