package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
)

// An application enqueues work in its own transaction: rolled back, nothing
// exists; committed, a running client works the items.
func TestStartRunTxWithEngine(t *testing.T) {
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	p := redrive.Pipeline{Name: "orders", Stages: []redrive.Stage{{Name: "notify", Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
		return it.Payload, nil
	}}}}
	c := redrive.NewClient(s, redrive.Config{PollInterval: time.Hour, RunCheckInterval: 10 * time.Millisecond})
	if err := c.Register(p); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	items := []redrive.NewItem{{Key: "order-1", Payload: []byte(`{"order":1}`)}, {Key: "order-2", Payload: []byte(`{"order":2}`)}}

	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run, _, err := s.StartRunTx(ctx, tx, p, items, redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Count(ctx, redrive.ItemFilter{Pipeline: "orders"}); n != 0 {
		t.Fatalf("%d items exist after a rollback", n)
	}

	tx, err = s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run, res, err := s.StartRunTx(ctx, tx, p, items, redrive.RunOptions{})
	if err != nil || len(res) != 2 || run.Counts.Pending != 2 {
		t.Fatalf("start: %+v %+v %v", run, res, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The poll interval is an hour: only the commit's notification can
	// wake the client this soon.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := c.WaitRun(wctx, run.ID)
	if err != nil || r.Status != redrive.RunCompleted || r.Counts.Succeeded != 2 {
		t.Fatalf("after commit: %+v %v", r, err)
	}
}
