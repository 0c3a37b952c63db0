package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// deadItems items dead on arrival in deadCauses groups fill failure_counts
// with a row each (its insert trigger's), over 2 MB.
const deadItems, deadCauses = 30000, 7

// deadCounts is a store whose failure_counts the tests of its VACUUMs
// watch: in a database of its own, since a VACUUM removes no row that a
// transaction of the same database may still see and other tests'
// transactions in a shared one would keep the fold's rows; and with the
// table's autovacuum off, as on a server that runs none, whatever this
// one does.
type deadCounts struct {
	t           *testing.T
	url, schema string
	q           string // the quoted schema
	s           *postgres.Store
	run         int64
}

// newDeadCounts opens the store and reads its error groups once, while
// failure_counts is empty: the process has measured the table, so that a
// VACUUM after fill can only come from a fold or a later measure.
func newDeadCounts(t *testing.T) *deadCounts {
	t.Helper()
	ctx := context.Background()
	f := &deadCounts{t: t, url: ownDatabase(t)}
	f.schema = pgtest.CreateSchema(t, f.url)
	f.q = pgx.Identifier{f.schema}.Sanitize()
	f.s = pgtest.OpenStoreAt(t, f.url, f.schema)
	if _, err := f.s.Pool().Exec(ctx, `ALTER TABLE `+f.q+`.failure_counts SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	run, _, err := f.s.CreateRun(ctx, "p", redrive.RunOptions{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.run = run.ID
	if _, err := f.s.FailureGroups(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}}); err != nil {
		t.Fatal(err)
	}
	return f
}

// fill inserts the deadItems items, dead on arrival, with SQL of its own:
// a writer that leaves failure_counts its triggers' rows unfolded (a bulk
// load, or an earlier version of the store), where the store's own
// enqueue would fold them as it writes them (TestFailureCountsFoldedAsWritten).
func (f *deadCounts) fill() {
	f.t.Helper()
	errs, fps := make([]string, deadCauses), make([]string, deadCauses)
	for i := range errs {
		errs[i] = fmt.Sprintf("bad field %c", 'a'+i)
		fps[i] = redrive.Fingerprint(errs[i])
	}
	if _, err := f.s.Pool().Exec(context.Background(), `INSERT INTO `+f.q+`.items (run_id, pipeline, stage, state,
			enqueued_at, next_at, updated_at, order_at, reason_stage, reason_class, reason_error, reason_attempts,
			reason_at, reason_fingerprint)
		SELECT $1, 'p', 'a', 'dead', now(), now(), now(), now(), 'a', $2, ($3::text[])[1 + g % $5],
			0, now(), ($4::text[])[1 + g % $5]
		FROM generate_series(0, $6 - 1) AS g`,
		f.run, redrive.ClassInvalidInput, errs, fps, deadCauses, deadItems); err != nil {
		f.t.Fatal(err)
	}
}

// size returns failure_counts's size in bytes.
func (f *deadCounts) size(s *postgres.Store) int64 {
	f.t.Helper()
	var n int64
	if err := s.Pool().QueryRow(context.Background(), `SELECT pg_relation_size($1::regclass)`, f.q+".failure_counts").Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// vacuums returns how many times failure_counts was vacuumed.
func (f *deadCounts) vacuums() int64 {
	f.t.Helper()
	var v int64
	if err := f.s.Pool().QueryRow(context.Background(), `SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = $1::regclass`,
		f.q+".failure_counts").Scan(&v); err != nil {
		f.t.Fatal(err)
	}
	return v
}

// check reads s's error groups of dead items and fails unless they hold
// the deadItems items in deadCauses groups.
func (f *deadCounts) check(s *postgres.Store, when string) {
	f.t.Helper()
	groups, err := s.FailureGroups(context.Background(), redrive.ItemFilter{States: []redrive.State{redrive.StateDead}})
	if err != nil {
		f.t.Fatal(err)
	}
	total := 0
	for _, g := range groups {
		total += g.Dead
	}
	if len(groups) != deadCauses || total != deadItems {
		f.t.Fatalf("%s: %d groups holding %d dead items, want %d holding %d", when, len(groups), total, deadCauses, deadItems)
	}
}

// The fold of failure_counts deletes every row it sums; the store then
// vacuums the table, so that it keeps the size of its live rows whether
// or not autovacuum runs. A table that grew without those VACUUMs (an
// earlier version's, or a store that runs none) shrinks on the first read
// of error groups of a process, and the counts read stay exact
// throughout.
func TestFailureCountsStaySmall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDeadCounts(t)
	s, q, url, schema := f.s, f.q, f.url, f.schema
	size, check := f.size, f.check
	f.fill()
	before := size(s)
	if before < 2<<20 {
		t.Fatalf("failure_counts holds %d bytes before its first fold, want its 30,000 rows (over 2 MB)", before)
	}
	// shrunk waits for s's VACUUMs and returns the table's size once it
	// is a few pages. A VACUUM keeps the rows that any transaction of the
	// database may still see, and a backend that is still starting up
	// counts for every database: while one does, it asks for another pass,
	// as the next fold would, for up to 30 s.
	// The passes asked for here come after the first, which the store
	// must have started itself: since is the table's VACUUM count before.
	vacuums := f.vacuums
	shrunk := func(s *postgres.Store, since int64) int64 {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if err := postgres.WaitSideVacuum(ctx, s); err != nil {
				t.Fatal(err)
			}
			if vacuums() == since {
				t.Fatal("the read started no VACUUM of failure_counts")
			}
			if n := size(s); n <= 4*8192 || time.Now().After(deadline) {
				return n
			}
			postgres.VacuumSide(s, true, false)
		}
	}
	// The read sums 30,000 rows, folds them and starts the VACUUM.
	since := vacuums()
	check(s, "first read")
	if n := shrunk(s, since); n > 4*8192 {
		t.Fatalf("failure_counts holds %d bytes after its fold and VACUUM (%d before), want its 7 rows' page or few more", n, before)
	}
	check(s, "after the VACUUM")

	// What a fold without VACUUM leaves: 30,002 more rows that sum to
	// nothing, folded by the statement an earlier version ran.
	exec := func(sql string) {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, strings.ReplaceAll(sql, "{schema}", q)); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO {schema}.failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
		SELECT pipeline, stage, class, fingerprint, run_id, kind, CASE WHEN g % 2 = 0 THEN 1 ELSE -1 END
		FROM {schema}.failure_counts, generate_series(1, 4286) AS g`)
	exec(`WITH d AS (DELETE FROM {schema}.failure_counts RETURNING *)
		INSERT INTO {schema}.failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
		SELECT pipeline, stage, class, fingerprint, run_id, kind, sum(n) FROM d
		GROUP BY pipeline, stage, class, fingerprint, run_id, kind HAVING sum(n) <> 0`)
	bloated := size(s)
	if bloated < 2<<20 {
		t.Fatalf("failure_counts holds %d bytes after a fold without VACUUM, want over 2 MB", bloated)
	}
	// A store that runs no VACUUM leaves the table as it is.
	off, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, VacuumAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	check(off, "read by a store that runs no VACUUM")
	if err := postgres.WaitSideVacuum(ctx, off); err != nil {
		t.Fatal(err)
	}
	off.Close()
	if n := size(s); n != bloated {
		t.Fatalf("a store with VacuumAfter -1 changed failure_counts from %d to %d bytes", bloated, n)
	}
	// A new process's first read finds the table large and shrinks it.
	next := pgtest.OpenStoreAt(t, url, schema)
	since = vacuums()
	check(next, "first read of a new process")
	if n := shrunk(next, since); n > 4*8192 {
		t.Fatalf("failure_counts holds %d bytes after a new process's first read (%d before), want a few pages", n, bloated)
	}
	check(next, "after the new process's VACUUM")
}

// The store folds the failure_counts rows that its own writes add, every
// 16,384, in the background, without waiting for a read of error
// groups: after a surge of deaths that nobody looked at, the table holds a
// row per group, and the first read sums those, not a row per death.
func TestFailureCountsFoldedAsWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDeadCounts(t)
	s := f.s
	rows := func(when string, want int) {
		t.Helper()
		if err := postgres.WaitSideVacuum(ctx, s); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+f.q+`.failure_counts`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("%s: failure_counts holds %d rows, want %d, one per group", when, n, want)
		}
	}
	// Dead on arrival: a row each from the items' insert trigger.
	in := make([]redrive.NewItem, deadItems)
	for i := range in {
		in[i] = redrive.NewItem{Payload: []byte(`{}`), Invalid: fmt.Sprintf("bad field %c", 'a'+i%deadCauses)}
	}
	if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: f.run, Pipeline: "p", Stage: "a", Items: in, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	rows("after enqueueing 30,000 dead items", deadCauses)

	// Dead after an attempt: a row for the item, one for its failed attempt.
	const worked = 9000
	in = make([]redrive.NewItem, worked)
	for i := range in {
		in[i].Payload = []byte(`{}`)
	}
	now := time.Now()
	if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: f.run, Pipeline: "p", Stage: "a", Items: in, Now: now}); err != nil {
		t.Fatal(err)
	}
	ls := claim(t, s, "p", worked, now)
	if len(ls) != worked {
		t.Fatalf("claimed %d items, want %d", len(ls), worked)
	}
	cs := make([]redrive.Completion, len(ls))
	for i, l := range ls {
		cs[i] = done(l, redrive.StateDead, now)
	}
	if _, err := s.Complete(ctx, cs); err != nil {
		t.Fatal(err)
	}
	rows("after 9,000 items died in their first attempt", deadCauses+2)

	// The sums are the items' and attempts' own.
	groups, err := s.FailureGroups(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}})
	if err != nil {
		t.Fatal(err)
	}
	dead, failed := 0, 0
	for _, g := range groups {
		dead, failed = dead+g.Dead, failed+g.Failures
	}
	if dead != deadItems+worked || failed != worked {
		t.Fatalf("error groups hold %d dead items and %d failures, want %d and %d", dead, failed, deadItems+worked, worked)
	}
}

// A VACUUM cuts failure_counts's empty tail only if it gets the table's
// exclusive lock, which it tries for a few seconds. When a reader holds
// the table as the store's VACUUM after a fold ends, the table keeps its
// size; a process that goes on reading, with no new failures to fold,
// measures the table again countsRecheck after the last time and vacuums
// it then.
func TestFailureCountsShrinkAfterATruncationDenied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDeadCounts(t)
	s, q, url := f.s, f.q, f.url
	postgres.SetCountsRecheck(s, time.Hour)
	size := func() int64 { t.Helper(); return f.size(s) }
	vacuums := f.vacuums
	read := func(when string) {
		t.Helper()
		f.check(s, when)
		if err := postgres.WaitSideVacuum(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	f.fill()
	if n := size(); n < 2<<20 {
		t.Fatalf("failure_counts holds %d bytes before its fold, want its 30,000 rows (over 2 MB)", n)
	}

	// A reader holds the table while the read's fold and VACUUMs run.
	reader, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	tx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+q+`.failure_counts IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	since := vacuums()
	read("read while another holds the table")
	if vacuums() == since {
		t.Fatal("the read's fold started no VACUUM of failure_counts")
	}
	held := size()
	if held < 2<<20 {
		t.Fatalf("failure_counts shrank to %d bytes while another transaction held it: this test needs a truncation that is denied", held)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// Within countsRecheck of its last measure a read leaves the table be:
	// no deltas to fold, no VACUUM.
	since = vacuums()
	read("read within an hour")
	if v := vacuums(); v != since || size() != held {
		t.Fatalf("a read within countsRecheck ran %d VACUUMs, table %d bytes (was %d), want none and the same size", v-since, size(), held)
	}

	// Past it, a read measures the table again and vacuums it. A VACUUM
	// keeps the rows that any transaction of the database may still see,
	// so the reads go on until the table is small, for up to 30 s.
	postgres.SetCountsRecheck(s, time.Nanosecond)
	deadline := time.Now().Add(30 * time.Second)
	for size() > 4*8192 {
		if time.Now().After(deadline) {
			t.Fatalf("failure_counts still holds %d bytes after 30 s of reads past countsRecheck (%d vacuums), want a few pages", size(), vacuums()-since)
		}
		read("read past countsRecheck")
	}
	if vacuums() == since {
		t.Fatal("failure_counts shrank without a VACUUM")
	}
}

// Every countsVacuumEvery completions the store vacuums run_counts, whose
// folds delete rows as failure_counts's do.
func TestRunCountsVacuumed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.NewSchema(t)
	s := pgtest.OpenStoreAt(t, url, schema)
	// As on a server that runs no autovacuum, whatever this one does: its
	// VACUUM could take the table first, and the store's skips a table
	// another VACUUM works on.
	if _, err := s.Pool().Exec(ctx, `ALTER TABLE `+pgx.Identifier{schema, "run_counts"}.Sanitize()+` SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	n := postgres.CountsVacuumEvery
	in := make([]redrive.NewItem, n)
	for i := range in {
		in[i].Payload = []byte(`{}`)
	}
	if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Items: in, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	vacuums := func() int64 {
		t.Helper()
		var v int64
		if err := s.Pool().QueryRow(ctx, `SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = $1::regclass`,
			pgx.Identifier{schema, "run_counts"}.Sanitize()).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	start := vacuums()
	now := time.Now()
	ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "w", Pipelines: []string{"p"}, Limit: n, LeaseUntil: now.Add(time.Hour), Now: now})
	if err != nil || len(ls) != n {
		t.Fatalf("claimed %d of %d: %v", len(ls), n, err)
	}
	// One completion per call: the calls, not the items, are counted.
	for i, l := range ls {
		if i == n-1 {
			if err := postgres.WaitSideVacuum(ctx, s); err != nil {
				t.Fatal(err)
			}
			if v := vacuums(); v != start {
				t.Fatalf("run_counts vacuumed %d times after %d completions, want none before the %dth", v-start, i, n)
			}
		}
		c := redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StateSucceeded, Stage: "a", Attempt: 1, Now: now,
			Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: redrive.OutcomeSucceeded, StartedAt: now, FinishedAt: now}}
		if applied, err := s.Complete(ctx, []redrive.Completion{c}); err != nil || !applied[0] {
			t.Fatalf("completion %d: applied %v, %v", i, applied, err)
		}
	}
	if err := postgres.WaitSideVacuum(ctx, s); err != nil {
		t.Fatal(err)
	}
	if v := vacuums(); v != start+1 {
		t.Fatalf("run_counts vacuumed %d times after %d completions, want once", v-start, n)
	}
	r, err := s.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Counts.Succeeded != n {
		t.Fatalf("run counts %d succeeded after the VACUUM, want %d", r.Counts.Succeeded, n)
	}
}

// Every OutboxVacuumEvery delivered notifications that retention deletes,
// the store vacuums the outbox, so that the next notifications take the
// space of the deleted ones instead of growing the table.
func TestOutboxVacuumed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := ownDatabase(t)
	schema := pgtest.CreateSchema(t, url)
	s := pgtest.OpenStoreAt(t, url, schema)
	outbox := pgx.Identifier{schema, "outbox"}.Sanitize()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`ALTER TABLE ` + outbox + ` SET (autovacuum_enabled = false)`)
	n := postgres.OutboxVacuumEvery
	delivered := time.Now().Add(-time.Hour)
	fill := func() int64 {
		t.Helper()
		exec(`INSERT INTO `+outbox+` (event, pipeline, run_id, item_id, stage, reason_error, occurred_at, status, next_at, updated_at)
			SELECT 'item.dead', 'p', 1, g, 'a', repeat('x', 200), $2, 'delivered', $2, $2 FROM generate_series(1, $1) AS g`, n, delivered)
		var size int64
		if err := s.Pool().QueryRow(ctx, `SELECT pg_relation_size($1::regclass)`, outbox).Scan(&size); err != nil {
			t.Fatal(err)
		}
		return size
	}
	vacuums := func() int64 {
		t.Helper()
		if err := postgres.WaitSideVacuum(ctx, s); err != nil {
			t.Fatal(err)
		}
		var v int64
		if err := s.Pool().QueryRow(ctx, `SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = $1::regclass`, outbox).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	remove := func(limit int) {
		t.Helper()
		if d, err := s.DeleteDelivered(ctx, time.Now(), limit); err != nil || d != limit {
			t.Fatalf("DeleteDelivered(%d) deleted %d: %v", limit, d, err)
		}
	}
	first := fill()
	start := vacuums()
	remove(n - 1)
	if v := vacuums(); v != start {
		t.Fatalf("outbox vacuumed %d times after %d deletions, want none before the %dth", v-start, n-1, n)
	}
	remove(1)
	if v := vacuums(); v != start+1 {
		t.Fatalf("outbox vacuumed %d times after %d deletions, want once", v-start, n)
	}
	// The VACUUM removed the 10,000 deleted rows and cut the emptied
	// table, unless a transaction elsewhere kept them (see
	// TestFailureCountsStaySmall); then it is asked again, for up to 30 s.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var size int64
		if err := s.Pool().QueryRow(ctx, `SELECT pg_relation_size($1::regclass)`, outbox).Scan(&size); err != nil {
			t.Fatal(err)
		}
		if size == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outbox holds %d bytes 30 s after its VACUUM of every row deleted, want none", size)
		}
		postgres.VacuumSide(s, false, true)
		if err := postgres.WaitSideVacuum(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if second := fill(); second > first+2*8192 {
		t.Fatalf("outbox grew from %d to %d bytes for as many notifications as it deleted", first, second)
	}
}
