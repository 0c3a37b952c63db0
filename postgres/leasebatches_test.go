package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
)

// TestRescueReachesPastOtherPipelines: a process that served pipelines x
// and y died holding more claims than one rescue reads (batchesSweep, 16).
// A rescuer of y alone takes the y leases of the first batches it reads;
// what those batches still hold is x's, which it does not serve. Those
// batches must not stay first in its way: every y lease is taken over in
// a few rescues, and the x leases wait, untouched, for a rescuer of x.
func TestRescueReachesPastOtherPipelines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	x, y := mustRun(t, s, "x"), mustRun(t, s, "y")
	const claims = 40
	for range claims {
		enqueue(t, s, x, redrive.NewItem{})
		enqueue(t, s, y, redrive.NewItem{})
	}
	// One claim per pair, each lease a second later than the one before.
	for i := range claims {
		until := t0.Add(time.Minute + time.Duration(i)*time.Second)
		ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "dead", Pipelines: []string{"x", "y"}, Limit: 2, Now: t0, LeaseUntil: until})
		if err != nil || len(ls) != 2 {
			t.Fatalf("claim %d: %d leases, %v", i, len(ls), err)
		}
	}
	later := t0.Add(time.Hour)
	rescue := func(p string) []redrive.Lease {
		t.Helper()
		ls, err := s.ClaimExpired(ctx, redrive.ClaimRequest{Owner: "rescuer-" + p, Pipelines: []string{p}, Limit: 1000,
			Now: later, LeaseUntil: later.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Item.Pipeline != p {
				t.Fatalf("rescuer of %s took item %d of %s", p, l.Item.ID, l.Item.Pipeline)
			}
		}
		return ls
	}
	took := 0
	for i := 0; i < claims && took < claims; i++ {
		took += len(rescue("y"))
	}
	if took != claims {
		t.Fatalf("rescues of y took %d of its %d expired leases", took, claims)
	}
	if again := rescue("y"); len(again) != 0 {
		t.Fatalf("a further rescue of y took %d", len(again))
	}
	running, err := s.ListItems(ctx, redrive.ItemFilter{RunID: x.ID, States: []redrive.State{redrive.StateRunning}, Limit: 1000})
	if err != nil || len(running) != claims {
		t.Fatalf("x's items running under their dead owner: %d, %v; want %d", len(running), err, claims)
	}
	took = 0
	for i := 0; i < claims && took < claims; i++ {
		took += len(rescue("x"))
	}
	if took != claims {
		t.Fatalf("rescues of x took %d of its %d expired leases", took, claims)
	}
	var batches int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM "`+s.Schema()+`".lease_batches WHERE held > 0 AND expires_at < $1`, later).Scan(&batches); err != nil {
		t.Fatal(err)
	}
	if batches != 0 {
		t.Fatalf("%d expired batches still hold leases", batches)
	}
}
