package postgres_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// TestUpgradeFrom0001 migrates a schema that only 0001_init was applied to,
// with an item and an attempt in it: later migrations apply, and the old
// rows read back with no failed attempts and no configuration hash.
func TestUpgradeFrom0001(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, q := storeAt(t, 1)
	for _, stmt := range []string{
		`INSERT INTO ` + q + `.runs (id, pipeline, status, created_at) VALUES (1, 'p', 'running', now())`,
		`INSERT INTO ` + q + `.items (id, run_id, pipeline, stage, state, attempt, enqueued_at, next_at, updated_at)
			VALUES (1, 1, 'p', 'a', 'pending', 1, now(), now(), now())`,
		`INSERT INTO ` + q + `.attempts (item_id, run_id, pipeline, stage, stage_index, number, outcome, started_at, finished_at)
			VALUES (1, 1, 'p', 'a', 0, 1, 'retry', now(), now())`,
	} {
		if _, err := s.Pool().Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ms, err := s.MigrationStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if !m.Applied {
			t.Errorf("migration %04d %s not applied by Migrate", m.Version, m.Name)
		}
	}
	it, err := s.GetItem(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if it.Attempt != 1 || it.FailedAttempts != 0 {
		t.Errorf("old item: Attempt %d, FailedAttempts %d; want 1, 0", it.Attempt, it.FailedAttempts)
	}
	as, err := s.Attempts(ctx, 1)
	if err != nil || len(as) != 1 || as[0].ConfigHash != "" {
		t.Fatalf("old attempts = %+v, %v; want one without a hash", as, err)
	}
}

// TestUpgradeKeepsRunningLeases migrates a schema at 0028 whose claims
// marked items 'running' (migration 0029 stores a leased item as pending
// with its lease): the items running then stay running, with their
// tokens, in the run's counts too; their holder still completes them; the
// rescuer takes over the ones whose lease expires; a claim of the old form
// fails rather than take an item leased anew; and the new leases' tokens
// exceed every old one.
func TestUpgradeKeepsRunningLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, q := storeAt(t, 28)
	run := mustRun(t, s, "p")
	enqueue(t, s, run, make([]redrive.NewItem, 10)...)
	// The claim of 0028's store: items 1 – 6 running, 1 – 3 until t0 + 1
	// minute, 4 – 6 for an hour; their tokens odd.
	for _, c := range []struct {
		ids   string
		until time.Time
	}{{"1, 2, 3", t0.Add(time.Minute)}, {"4, 5, 6", t0.Add(time.Hour)}} {
		if _, err := s.Pool().Exec(ctx, `UPDATE `+q+`.items SET state = 'running', lease_token = lease_token + 1,
			lease_owner = 'old', lease_expires_at = $1, updated_at = $2 WHERE id IN (`+c.ids+`)`, c.until, t0); err != nil {
			t.Fatal(err)
		}
	}
	before, err := s.GetRun(ctx, run.ID)
	if err != nil || before.Counts.Running != 6 || before.Counts.Pending != 4 {
		t.Fatalf("before the migration: counts %+v, %v; want 6 running, 4 pending", before.Counts, err)
	}
	// This build, ahead of its schema, cannot claim and says why.
	if _, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "new", Pipelines: []string{"p"}, Limit: 1, Now: t0, LeaseUntil: t0.Add(time.Minute)}); err == nil ||
		!strings.Contains(err.Error(), "migration 0029") {
		t.Fatalf("claim before the migration: %v; want an error naming migration 0029", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := s.GetRun(ctx, run.ID)
	if err != nil || after.Counts != before.Counts {
		t.Fatalf("after the migration: counts %+v, %v; want %+v", after.Counts, err, before.Counts)
	}
	it, err := s.GetItem(ctx, 4)
	if err != nil || it.State != redrive.StateRunning || it.LeaseOwner != "old" {
		t.Fatalf("item 4 after the migration: %+v, %v; want running under its lease", it, err)
	}
	running, err := s.ListItems(ctx, redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StateRunning}, Limit: 100})
	if err != nil || len(running) != 6 {
		t.Fatalf("running items listed: %d, %v; want 6", len(running), err)
	}
	// A process older than the migration claims in the old form: refused.
	if _, err := s.Pool().Exec(ctx, `UPDATE `+q+`.items SET state = 'running', lease_token = lease_token + 1 WHERE id = 7`); err == nil ||
		!strings.Contains(err.Error(), "items_no_running_state") {
		t.Fatalf("old claim after the migration: %v; want the check constraint's violation", err)
	}
	// Item 4's holder completes it with its token from before.
	ok, err := s.Complete(ctx, []redrive.Completion{done(redrive.Lease{Item: it, Token: 1}, redrive.StateSucceeded, t0)})
	if err != nil || !ok[0] {
		t.Fatalf("completion of a lease from before the migration: %v, %v", ok, err)
	}
	// New claims take the four pending items, with tokens above every old one.
	ls := claim(t, s, "p", 10, t0)
	if len(ls) != 4 || ls[0].Item.ID != 7 || ls[0].Token <= 2 {
		t.Fatalf("claim after the migration: %+v", ls)
	}
	// At t0 + 2 minutes the leases of 1 – 3 (from before) and of 7 – 10
	// (claimed for a minute) have expired, not those of 5 and 6.
	ids := func(ls []redrive.Lease) []int64 {
		var out []int64
		for _, l := range ls {
			out = append(out, l.Item.ID)
		}
		return out
	}
	later := t0.Add(2 * time.Minute)
	exp, err := s.ClaimExpired(ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 10, Now: later, LeaseUntil: later.Add(time.Hour)})
	if err != nil || !slices.Equal(ids(exp), []int64{1, 2, 3, 7, 8, 9, 10}) {
		t.Fatalf("ClaimExpired at t0 + 2 minutes took %v, %v; want 1 – 3 and 7 – 10", ids(exp), err)
	}
	if again, err := s.ClaimExpired(ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 10, Now: later, LeaseUntil: later.Add(time.Hour)}); err != nil || len(again) != 0 {
		t.Fatalf("ClaimExpired again at t0 + 2 minutes took %v, %v; want none", ids(again), err)
	}
	// Two hours on, every lease held has expired: 5 and 6 from before
	// and the rescuer's own.
	muchLater := t0.Add(2 * time.Hour)
	exp, err = s.ClaimExpired(ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 10, Now: muchLater, LeaseUntil: muchLater.Add(time.Hour)})
	if err != nil || !slices.Equal(ids(exp), []int64{1, 2, 3, 5, 6, 7, 8, 9, 10}) {
		t.Fatalf("ClaimExpired two hours on took %v, %v; want 1 – 3, 5, 6 and 7 – 10", ids(exp), err)
	}
	final, err := s.GetRun(ctx, run.ID)
	if err != nil || final.Counts.Running != 9 || final.Counts.Succeeded != 1 || final.Counts.Pending != 0 {
		t.Fatalf("final counts %+v, %v; want 9 running, 1 succeeded", final.Counts, err)
	}
}

// TestUpgradeClaimedAt migrates a schema at 0029, where a running item
// reported as updated when it last became pending, to 0030: a claim by
// this build ahead of its schema names the migration; after it, a running
// item reports when its lease began, and one leased by a process of the
// build before (whose batches have no claimed_at) reports when it became
// pending, as under 0029.
func TestUpgradeClaimedAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, q := storeAt(t, 29)
	run := mustRun(t, s, "p")
	enqueue(t, s, run, make([]redrive.NewItem, 2)...)
	if _, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "new", Pipelines: []string{"p"}, Limit: 1, Now: t0, LeaseUntil: t0.Add(time.Minute)}); err == nil ||
		!strings.Contains(err.Error(), "migration 0030") {
		t.Fatalf("claim before the migration: %v; want an error naming migration 0030", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ls := claim(t, s, "p", 1, t0.Add(time.Second))
	if len(ls) != 1 || !ls[0].Item.UpdatedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("claim after the migration: %+v; want UpdatedAt t0 + 1 s", ls)
	}
	if it, err := s.GetItem(ctx, ls[0].Item.ID); err != nil || !it.UpdatedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("claimed item: %+v, %v; want UpdatedAt t0 + 1 s", it, err)
	}
	// The batch as a process of 0029's build writes it.
	if _, err := s.Pool().Exec(ctx, `UPDATE `+q+`.lease_batches SET claimed_at = NULL`); err != nil {
		t.Fatal(err)
	}
	it, err := s.GetItem(ctx, ls[0].Item.ID)
	if err != nil || it.State != redrive.StateRunning || !it.UpdatedAt.Equal(t0) {
		t.Fatalf("item leased by the build before: %+v, %v; want running, UpdatedAt t0 (its enqueue)", it, err)
	}
}

// storeAt opens a store, not migrated, on a new schema to which the
// migrations up to version were applied as Migrate applies them, and
// returns it with the schema's quoted name.
func storeAt(t *testing.T, version int) (*postgres.Store, string) {
	t.Helper()
	ctx := context.Background()
	url, schema := pgtest.NewSchema(t)
	s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	q := `"` + schema + `"`
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	stmts := []string{`CREATE SCHEMA IF NOT EXISTS ` + q,
		`CREATE TABLE ` + q + `.schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`}
	for _, f := range files {
		base := filepath.Base(f)
		v, err := strconv.Atoi(base[:4])
		if err != nil {
			t.Fatal(err)
		}
		if v > version {
			break
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, strings.ReplaceAll(string(b), "{schema}", q),
			fmt.Sprintf(`INSERT INTO %s.schema_migrations (version, name) VALUES (%d, '%s')`, q, v, strings.TrimSuffix(base[5:], ".sql")))
	}
	for _, stmt := range stmts {
		if _, err := s.Pool().Exec(ctx, stmt); err != nil {
			t.Fatalf("%.200s: %v", stmt, err)
		}
	}
	return s, q
}

// TestUpgradeRecordsDroppedLeases migrates a schema at 0030 whose ledger a
// rescue of the build before left wrong: of a claim of three leases, its
// batch holds only the first, and the completion of the second, which the
// batch no longer held, counted it off to zero. Without 0031 the rescuer
// would delete that batch unread and could never find the first or third
// lease again; after it, both are taken over.
func TestUpgradeRecordsDroppedLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, q := storeAt(t, 30)
	run := mustRun(t, s, "p")
	enqueue(t, s, run, make([]redrive.NewItem, 3)...)
	ls := claim(t, s, "p", 3, t0)
	if len(ls) != 3 {
		t.Fatalf("claim: %d leases, want 3", len(ls))
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE `+q+`.lease_batches SET ids = ids[1:1], held = 1`); err != nil {
		t.Fatal(err)
	}
	if applied, err := s.Complete(ctx, []redrive.Completion{done(ls[1], redrive.StateSucceeded, t0.Add(time.Second))}); err != nil || !applied[0] {
		t.Fatalf("completion: %v, %v", applied, err)
	}
	var held int
	if err := s.Pool().QueryRow(ctx, `SELECT held FROM `+q+`.lease_batches`).Scan(&held); err != nil || held != 0 {
		t.Fatalf("the batch before the migration: held %d, %v; want 0", held, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(time.Hour)
	took, err := s.ClaimExpired(ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 10, Now: later, LeaseUntil: later.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, l := range took {
		ids = append(ids, l.Item.ID)
	}
	if want := []int64{ls[0].Item.ID, ls[2].Item.ID}; !slices.Equal(ids, want) {
		t.Fatalf("rescued %v; want %v", ids, want)
	}
	r, err := s.GetRun(ctx, run.ID)
	if err != nil || r.Counts.Running != 2 || r.Counts.Succeeded != 1 {
		t.Fatalf("counts %+v, %v; want 2 running, 1 succeeded", r.Counts, err)
	}
}
