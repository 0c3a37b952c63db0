package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redrive/redrive"
	"github.com/spf13/cobra"
)

// newOutboxCmd returns `redrive outbox list|redrive`: the notifications
// that webhooks deliver (docs/webhooks.md).
func newOutboxCmd() *cobra.Command {
	cmd := newGroupCmd("outbox", "List and redrive webhook notifications")
	cmd.Long = `List and redrive webhook notifications: the outbox rows written with each
announced state change (item.dead, item.succeeded, item.canceled,
run.finished) and delivered by the workers of serve --pipelines. A
notification is pending until delivered; one the receiver refused for good
(a 4xx) or that ran out of attempts is dead, and stays until redriven.`
	cmd.AddCommand(newOutboxListCmd(), newOutboxRedriveCmd())
	return cmd
}

// outboxFlags are the filters of the outbox commands.
type outboxFlags struct {
	pipeline, status, event string
	afterID                 int64
	limit                   int
}

func (o *outboxFlags) add(cmd *cobra.Command, status string, limit int) {
	cmd.Flags().StringVar(&o.pipeline, "pipeline", "", "only notifications of this pipeline")
	cmd.Flags().StringVar(&o.event, "event", "", "only this event: item.dead, item.succeeded, item.canceled or run.finished")
	cmd.Flags().IntVar(&o.limit, "limit", limit, "at most this many")
	if status != "" {
		cmd.Flags().StringVar(&o.status, "status", status, "pending, delivered or dead; empty for all")
		cmd.Flags().Int64Var(&o.afterID, "after-id", 0, "only notifications with a larger ID (paging)")
	}
}

func (o *outboxFlags) filter() (redrive.NotificationFilter, error) {
	f := redrive.NotificationFilter{Pipeline: o.pipeline, Event: o.event, AfterID: o.afterID, Limit: o.limit}
	if o.status != "" {
		f.Statuses = []redrive.NotificationStatus{redrive.NotificationStatus(o.status)}
	}
	if o.limit < 0 {
		return f, flagErrorf("limit", "%d is negative", o.limit)
	}
	if err := f.Validate(); err != nil {
		flag := "status"
		if f.Event != "" && !redrive.ValidEvent(f.Event) {
			flag = "event"
		}
		return f, flagErrorf(flag, "%v", err)
	}
	return f, nil
}

func outboxOf(s redrive.Store) (redrive.Outbox, error) {
	o, ok := s.(redrive.Outbox)
	if !ok {
		return nil, errors.New("the database keeps no outbox")
	}
	return o, nil
}

func newOutboxListCmd() *cobra.Command {
	var of outboxFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List notifications, dead ones by default",
		Example: `  redrive outbox list
  redrive outbox list --status pending --pipeline reports --json`,
		Args: noArgs,
	}
	of.add(cmd, string(redrive.NotificationDead), 100)
	asJSON := addJSONFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := of.filter()
		if err != nil {
			return err
		}
		s, closeFn, err := storeFor(cmd)
		if err != nil {
			return err
		}
		defer closeFn()
		o, err := outboxOf(s)
		if err != nil {
			return err
		}
		ns, err := o.ListNotifications(cmd.Context(), f)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(cmd.OutOrStdout(), ns)
		}
		return writeOutboxTable(cmd.OutOrStdout(), ns)
	}
	return cmd
}

func writeOutboxTable(w io.Writer, ns []redrive.Notification) error {
	t := newTable(w, "ID", "DELIVERY", "EVENT", "PIPELINE", "RUN", "ITEM", "STATUS", "ATTEMPTS", "NEXT", "ERROR")
	for _, n := range ns {
		item := ""
		if n.ItemID != 0 {
			item = fmt.Sprint(n.ItemID)
		}
		next := ""
		if n.Status == redrive.NotificationPending {
			next = fmtTime(n.NextAt)
		}
		t.row(n.ID, n.DeliveryID, n.Event, n.Pipeline, n.RunID, item, n.Status, n.Attempts, next, truncate(n.LastError, 60))
	}
	return t.flush()
}

func newOutboxRedriveCmd() *cobra.Command {
	var of outboxFlags
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Make dead notifications pending again, to be delivered with their delivery IDs",
		Long: `Make the dead notifications selected by the filters pending again, due now,
with a fresh attempt count. They keep their delivery IDs, so a receiver that
did get one already recognises it. Nothing is lost by a redrive, so it asks
no confirmation.`,
		Example: `  redrive outbox redrive --pipeline reports`,
		Args:    noArgs,
	}
	of.add(cmd, "", 0)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := of.filter()
		if err != nil {
			return err
		}
		s, closeFn, err := storeFor(cmd)
		if err != nil {
			return err
		}
		defer closeFn()
		o, err := outboxOf(s)
		if err != nil {
			return err
		}
		n, err := o.RedriveNotifications(cmd.Context(), f, time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "redrove %d notification(s)\n", n)
		return nil
	}
	return cmd
}
