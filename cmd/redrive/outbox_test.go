package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/sqlite"
)

func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "redrive.db")
	s, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := s.Subscribe(ctx, "reports", nil, now); err != nil {
		t.Fatal(err)
	}
	if err := s.Subscribe(ctx, "reports", redrive.DefaultEvents, now); err != nil {
		t.Fatal(err)
	}
	run, _, err := s.CreateRun(ctx, "reports", redrive.RunOptions{}, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "reports", Stage: "render", Now: now,
		Items: []redrive.NewItem{{Key: "r1", Invalid: "not JSON"}, {Key: "r2", Invalid: "not JSON"}}}); err != nil {
		t.Fatal(err)
	}
	ns, err := s.ClaimNotifications(ctx, redrive.ClaimRequest{Pipelines: []string{"reports"}, Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(ns) != 1 {
		t.Fatalf("claim = %v, %v", ns, err)
	}
	if _, err := s.SettleNotifications(ctx, []redrive.DeliveryResult{{ID: ns[0].ID, Token: ns[0].Token,
		Status: redrive.NotificationDead, Attempts: 1, Error: "410 Gone", Now: now}}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	dbf := "sqlite:" + db
	r := mustRun(t, 0, "--db", dbf, "outbox", "list")
	wantContains(t, "outbox list", r.stdout, "item.dead", "reports", "410 Gone", ns[0].DeliveryID)
	if strings.Count(r.stdout, "item.dead") != 1 {
		t.Errorf("outbox list shows more than the dead notification:\n%s", r.stdout)
	}
	var all []redrive.Notification
	decodeJSON(t, mustRun(t, 0, "--db", dbf, "outbox", "list", "--status", "", "--json"), &all)
	if len(all) != 2 {
		t.Errorf("outbox list --status '' = %d notifications, want 2", len(all))
	}
	r = mustRun(t, 2, "--db", dbf, "outbox", "list", "--status", "lost")
	wantContains(t, "bad status", r.stderr, "--status", "lost")
	r = mustRun(t, 2, "--db", dbf, "outbox", "redrive", "--event", "item.exploded")
	wantContains(t, "bad event", r.stderr, "--event", "item.exploded")
	r = mustRun(t, 0, "--db", dbf, "outbox", "redrive", "--pipeline", "reports")
	wantContains(t, "outbox redrive", r.stdout, "redrove 1 notification")
	decodeJSON(t, mustRun(t, 0, "--db", dbf, "outbox", "list", "--json"), &all)
	if len(all) != 0 {
		t.Errorf("dead after redrive: %+v", all)
	}
}
