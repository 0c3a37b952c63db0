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

// TestCompletionSkipsALockedBatch: a completion whose claim's row in
// lease_batches another transaction holds (here one left open; in use,
// a completion of the claim's other leases not yet committed) does not
// wait for it. It applies at once and leaves the batch counted high by
// its lease; once the batch expires, the rescuer reads its items, finds
// the lease ended and deletes the batch, taking nothing.
func TestCompletionSkipsALockedBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	run := mustRun(t, s, "p")
	enqueue(t, s, run, redrive.NewItem{}, redrive.NewItem{})
	ls := claim(t, s, "p", 2, t0)
	if len(ls) != 2 {
		t.Fatalf("claim: %d leases, want 2", len(ls))
	}
	batches := `"` + s.Schema() + `".lease_batches`
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var held int
	if err := tx.QueryRow(ctx, `SELECT held FROM `+batches+` WHERE id = $1 FOR UPDATE`, ls[0].Token>>1).Scan(&held); err != nil || held != 2 {
		t.Fatalf("the claim's batch: held %d, %v; want 2", held, err)
	}
	// Bounded so that a completion that waits for the lock fails the
	// test rather than hanging it.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	at := t0.Add(time.Second)
	applied, err := s.Complete(cctx, []redrive.Completion{done(ls[0], redrive.StateSucceeded, at)})
	if err != nil || !applied[0] {
		t.Fatalf("completion beside a locked batch: applied %v, %v", applied, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT held FROM `+batches+` WHERE id = $1`, ls[0].Token>>1).Scan(&held); err != nil || held != 2 {
		t.Fatalf("the batch after the completion skipped it: held %d, %v; want 2 (counted high)", held, err)
	}
	it, err := s.GetItem(ctx, ls[0].Item.ID)
	if err != nil || it.State != redrive.StateSucceeded {
		t.Fatalf("the completed item: %v, %v", it.State, err)
	}
	// The other lease ends too, counted off as usual.
	if err := s.Release(ctx, []redrive.LeaseRef{ls[1].Ref()}, at); err != nil {
		t.Fatal(err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT held FROM `+batches+` WHERE id = $1`, ls[0].Token>>1).Scan(&held); err != nil || held != 1 {
		t.Fatalf("the batch after a release: held %d, %v; want 1", held, err)
	}
	// The released item is pending again, for a claim, not the rescuer,
	// which reads the expired batch, finds no lease held and deletes it.
	later := t0.Add(time.Hour)
	took, err := s.ClaimExpired(ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 10, Now: later, LeaseUntil: later.Add(time.Minute)})
	if err != nil || len(took) != 0 {
		t.Fatalf("rescue: took %d, %v; want none", len(took), err)
	}
	var left int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+batches).Scan(&left); err != nil || left != 0 {
		t.Fatalf("batches left after the rescue: %d, %v; want 0", left, err)
	}
}

// TestRescueKeepsLeasesRenewedMidStatement: a rescue reads its batches'
// items in the snapshot its statement started with, and a heartbeat may
// renew one of those leases (a new version of the item's row) before the
// rescue locks it. The rescue then takes the item over or leaves it, but
// never drops a lease it did not take from the ledger: a lease in no
// batch is one no rescuer can ever take over. Heartbeats renew every
// lease without a pause while a rescuer takes them over one at a time;
// after each rescue, every lease not yet taken must still be in a batch.
func TestRescueKeepsLeasesRenewedMidStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	run := mustRun(t, s, "p")
	const n = 100
	enqueue(t, s, run, make([]redrive.NewItem, n)...)
	ls := claim(t, s, "p", n, t0)
	if len(ls) != n {
		t.Fatalf("claim: %d leases, want %d", len(ls), n)
	}
	refs := make([]redrive.LeaseRef, n)
	for i, l := range ls {
		refs[i] = l.Ref()
	}
	hctx, stop := context.WithCancel(ctx)
	beats := make(chan error, 1)
	go func() {
		var err error
		for hctx.Err() == nil {
			if _, err = s.Heartbeat(hctx, refs, t0.Add(2*time.Minute)); err != nil && hctx.Err() == nil {
				break
			}
			err = nil
		}
		beats <- err
	}()
	defer func() {
		stop()
		if err := <-beats; err != nil {
			t.Errorf("heartbeat: %v", err)
		}
	}()
	later := t0.Add(time.Hour)
	taken := make(map[int64]bool, n)
	batches := `"` + s.Schema() + `".lease_batches`
	for try := 0; len(taken) < n; try++ {
		if try == 20*n {
			t.Fatalf("%d rescues took over %d of %d leases", try, len(taken), n)
		}
		got, err := s.ClaimExpired(ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 1,
			Now: later, LeaseUntil: later.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range got {
			taken[l.Item.ID] = true
		}
		var left []int64
		for _, l := range ls {
			if !taken[l.Item.ID] {
				left = append(left, l.Item.ID)
			}
		}
		var orphans []int64
		if err := s.Pool().QueryRow(ctx, `SELECT coalesce(array_agg(x), '{}') FROM unnest($1::bigint[]) AS x
			WHERE NOT EXISTS (SELECT 1 FROM `+batches+` b, unnest(b.ids) AS y WHERE y = x)`, left).Scan(&orphans); err != nil {
			t.Fatal(err)
		}
		if len(orphans) > 0 {
			t.Fatalf("after rescue %d, leases in no batch: items %v (taken over %d of %d)", try+1, orphans, len(taken), n)
		}
		if len(taken) == n {
			t.Logf("%d rescues took over %d leases", try+1, n)
		}
	}
}
