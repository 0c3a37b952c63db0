package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// storeWithoutVacuum opens a store in a schema of its own that runs no
// VACUUM of its own (Options.VacuumAfter -1), so that the tests set the
// statistics; it is closed when the test ends.
func storeWithoutVacuum(t testing.TB) (*postgres.Store, string) {
	t.Helper()
	url, schema := pgtest.NewSchema(t)
	s, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema, Migrate: true, VacuumAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, schema
}

// emptyItems fills the items table with 20,000 items of run, deletes them
// all and vacuums the table without truncating it, so that VACUUM leaves
// reltuples 0 with its pages kept: the statistics under which the planner
// estimates one row of items whatever the table holds.
func emptyItems(t testing.TB, s *postgres.Store, schema string, run redrive.Run) {
	t.Helper()
	for range 4 {
		enqueue(t, s, run, make([]redrive.NewItem, 5000)...)
	}
	emptyAndVacuum(t, s, schema+`.items`)
}

// emptyAndVacuum deletes every row of table and vacuums it without
// truncating it, then checks that VACUUM left reltuples 0 over the pages
// it kept: the statistics under which the planner estimates one row
// whatever the table holds next.
func emptyAndVacuum(t testing.TB, s *postgres.Store, table string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Pool().Exec(ctx, `DELETE FROM `+table); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `VACUUM (TRUNCATE false) `+table); err != nil {
		t.Fatal(err)
	}
	var pages int
	var tuples float64
	if err := s.Pool().QueryRow(ctx, `SELECT relpages, reltuples FROM pg_class WHERE oid = $1::regclass`, table).Scan(&pages, &tuples); err != nil {
		t.Fatal(err)
	}
	if pages == 0 || tuples != 0 {
		t.Fatalf("after the VACUUM of the emptied %s: relpages %d, reltuples %v; want pages and no tuples", table, pages, tuples)
	}
}

// waitLocked waits until a statement on the store's schema waits for a
// lock.
func waitLocked(t *testing.T, s *postgres.Store) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`,
			s.Schema()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no statement on schema %s waits for a lock", s.Schema())
		}
		time.Sleep(5 * time.Millisecond) // polls a condition, with a deadline
	}
}

// An item updated by another transaction after a completion's or a
// heartbeat's statement began, and before it reached the item, is updated
// in its newest version, checked by its token: PostgreSQL rechecks the
// statement's join, by ID and token, on that version (a join by the
// row's address, its ctid, would skip it). A heartbeat (lease_expires_at
// only) committed in between leaves the lease held; a token changed in
// between (the lease taken over) makes the completion miss.
func TestLeasedRowUpdatedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	run := mustRun(t, s, "p")
	enqueue(t, s, run, make([]redrive.NewItem, 3)...)
	ls := claim(t, s, "p", 3, t0)
	if len(ls) != 3 {
		t.Fatalf("claimed %d items, want 3", len(ls))
	}
	// meanwhile holds item l's row with an uncommitted update (set), runs
	// call, which must wait for the row, and commits once it waits.
	meanwhile := func(l redrive.Lease, set string, call func() error) {
		t.Helper()
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `UPDATE `+s.Schema()+`.items SET `+set+` WHERE id = $1`, l.Item.ID); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- call() }()
		waitLocked(t, s)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	var lost []int64
	meanwhile(ls[0], `lease_expires_at = lease_expires_at + interval '1 second'`, func() (err error) {
		lost, err = s.Heartbeat(ctx, []redrive.LeaseRef{ls[0].Ref()}, t0.Add(time.Hour))
		return err
	})
	if len(lost) != 0 {
		t.Errorf("heartbeat after another update of the item: lost %v, want none", lost)
	}
	var applied []bool
	meanwhile(ls[1], `lease_expires_at = lease_expires_at + interval '1 second'`, func() (err error) {
		applied, err = s.Complete(ctx, []redrive.Completion{done(ls[1], redrive.StateSucceeded, t0)})
		return err
	})
	if len(applied) != 1 || !applied[0] {
		t.Errorf("completion after another update of the item: applied %v, want [true]", applied)
	}
	meanwhile(ls[2], `lease_token = lease_token + 2`, func() (err error) {
		applied, err = s.Complete(ctx, []redrive.Completion{done(ls[2], redrive.StateSucceeded, t0)})
		return err
	})
	if len(applied) != 1 || applied[0] {
		t.Errorf("completion after the lease was taken over: applied %v, want [false]", applied)
	}
	var lease *time.Time
	if err := s.Pool().QueryRow(ctx, `SELECT lease_expires_at FROM `+s.Schema()+`.items WHERE id = $1`, ls[0].Item.ID).Scan(&lease); err != nil {
		t.Fatal(err)
	}
	if lease == nil || !lease.Equal(t0.Add(time.Hour)) {
		t.Errorf("heartbeat: lease until %v, want %v", lease, t0.Add(time.Hour))
	}
}
