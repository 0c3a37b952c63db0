package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// OldestDue reads ready items in claim order only as far as one of them
// can be due longer than the oldest found; past its read limit it returns
// the oldest due time it read, and says that it stopped.
func TestOldestDueReadLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	run := mustRun(t, s, "od")
	in := make([]redrive.NewItem, 300)
	for i := range in {
		in[i].Payload = []byte(`{}`)
	}
	enqueue(t, s, run, in...)
	retried := t0.Add(40 * time.Minute)
	ls := claim(t, s, "od", 300, t0.Add(10*time.Minute))
	cs := make([]redrive.Completion, len(ls))
	for i, l := range ls {
		cs[i] = done(l, redrive.StatePending, retried)
	}
	if _, err := s.Complete(ctx, cs); err != nil {
		t.Fatal(err)
	}
	// Due at 20m, after the 300 retries (ordered at t0) in claim order.
	behind := t0.Add(20 * time.Minute)
	if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "od", Stage: "a",
		Items: []redrive.NewItem{{Payload: []byte(`{}`)}}, Now: behind}); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Hour)
	for _, c := range []struct {
		limit int
		want  time.Time
		exact bool
	}{{100, retried, false}, {300, retried, false}, {301, retried, false}, {302, behind, true}, {100_000, behind, true}} {
		got, exact, err := postgres.OldestDueRead(ctx, s, now, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(c.want) || exact != c.exact {
			t.Errorf("read limit %d: %v, exact %v; want %v, exact %v", c.limit, got, exact, c.want, c.exact)
		}
	}
	if got, err := s.OldestDue(ctx, now); err != nil || !got.Equal(behind) {
		t.Errorf("OldestDue = %v, %v; want %v", got, err, behind)
	}
}
