package main

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
	"github.com/spf13/cobra"
)

// The commands that change items or stages record what they did in the
// audit log, under the name of the person acting, as the API and the
// console do: `redrive dlq redrive|purge` and `redrive stages
// pause|resume`.

// osUser names the user running the command: the account's name, else
// $USER, else "unknown".
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}

// addActorFlag registers --actor on cmd: who acts, as the audit log
// records it. Its default is the OS user.
func addActorFlag(cmd *cobra.Command) *string {
	actor := new(string)
	cmd.Flags().StringVar(actor, "actor", "", "who acts, as the audit log records it (default: the OS user, "+osUser()+")")
	return actor
}

// actorOf returns the actor of --actor, or the OS user when it was not
// given; a name the audit log cannot record is a usage error.
func actorOf(cmd *cobra.Command, actor string) (string, error) {
	if !cmd.Flags().Changed("actor") {
		return osUser(), nil
	}
	if err := web.CheckActor(actor); err != nil {
		return "", flagErrorf("actor", "%v: give the name of the person acting", err)
	}
	return actor, nil
}

// auditedChange is an action recorded in the audit log before it runs.
type auditedChange struct {
	s  redrive.Store
	id int64
}

// beginChange records an action of kind on f by actor, counting n items
// (the dry run's count), and marks the items mark selects (redrive.ItemFilter
// with no item: a purge, whose items go). Nothing changes when the audit
// log cannot record it: the command then fails before acting.
func beginChange(ctx context.Context, s redrive.Store, actor, kind string, f redrive.ItemFilter, n int, detail string, mark *redrive.ItemFilter) (*auditedChange, error) {
	id, err := s.RecordAction(ctx, redrive.AuditAction{At: time.Now().UTC(), Actor: actor, Kind: kind, Filter: web.FilterQuery(f), Count: n, Detail: detail})
	if err != nil {
		return nil, fmt.Errorf("%s: the audit log cannot record it, nothing was changed: %w", kind, err)
	}
	if mark != nil {
		if _, err := s.MarkItems(ctx, id, *mark); err != nil {
			return nil, fmt.Errorf("%s: the audit log cannot link the items to it, nothing was changed: %w", kind, err)
		}
	}
	return &auditedChange{s: s, id: id}, nil
}

// end records the count of the action once it ran, or that it failed.
func (a *auditedChange) end(ctx context.Context, kind string, n int, detail string, actErr error) error {
	if actErr != nil {
		n, detail = 0, "failed"+map[bool]string{true: ": " + detail}[detail != ""]
	}
	// The action is done: record it even when the command is interrupted.
	if err := a.s.UpdateAction(context.WithoutCancel(ctx), a.id, n, detail); err != nil && actErr == nil {
		return fmt.Errorf("%s of %s done, but the audit log could not record its count: %w", kind, nItems(n), err)
	}
	return nil
}
