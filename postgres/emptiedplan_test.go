package postgres_test

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/postgres"
)

var actualRowsRE = regexp.MustCompile(`actual rows=(\d+) loops=(\d+)`)

// The statements that write the items of leases (completions, heartbeats,
// releases, start marks) read no more items than they name, whatever the
// statistics say. Right after a VACUUM of an items table whose rows were
// all dead and whose pages it kept, PostgreSQL estimates the table at one
// row however many it holds; the completion, then planned as a nested loop
// over items_pkey and the completions, put items outer, walked all of
// items_pkey and rescanned the 2,000 completions for each item (14.5 s a
// batch here, 17 s in a benchmark). Checked on a table never vacuumed, on
// one emptied and vacuumed so, and once analyzed: in every plan, each
// scan of items is one of items_pkey that reads, over all its runs, no
// more rows than there are leases, and no join discards rows it read.
func TestLeaseWritePlansAfterEmptiedVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, emptied := range []bool{false, true} {
		s, schema := storeWithoutVacuum(t)
		items := pgx.Identifier{schema, "items"}.Sanitize()
		run := mustRun(t, s, "p")
		if emptied {
			emptyItems(t, s, schema, run)
		}
		enqueue(t, s, run, make([]redrive.NewItem, 4000)...)
		ls := claim(t, s, "p", 2000, t0)
		// The lower half succeeds (the success-only statement), the upper
		// half dies (the full one).
		cs := make([]redrive.Completion, len(ls))
		for i, l := range ls {
			st := redrive.StateSucceeded
			if l.Item.ID > ls[len(ls)/2].Item.ID {
				st = redrive.StateDead
			}
			cs[i] = done(l, st, t0)
		}
		check := func(when string) {
			t.Helper()
			plans, err := postgres.LeaseWritePlans(ctx, s, cs)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"complete success", "complete full", "heartbeat", "release", "mark started"} {
				plan, ok := plans[name]
				if !ok {
					t.Fatalf("%s: no plan of %s", when, name)
				}
				checkLeaseWritePlan(t, when+", "+name, plan, len(cs))
			}
		}
		when := map[bool]string{false: "never vacuumed", true: "emptied and vacuumed"}[emptied]
		check(when)
		if _, err := s.Pool().Exec(ctx, `ANALYZE `+items); err != nil {
			t.Fatal(err)
		}
		check(when + ", then analyzed")
	}
}

// checkLeaseWritePlan checks an EXPLAIN ANALYZE of a statement that writes
// the items of n leases (or n items it names by ID).
func checkLeaseWritePlan(t *testing.T, what, plan string, n int) {
	t.Helper()
	checkIDWritePlan(t, what, plan, "items", n)
}

// checkIDWritePlan checks an EXPLAIN ANALYZE of a statement that writes n
// rows of table that it names by ID: every scan of table is one of its
// primary key that reads, over all its runs, no more than n rows, and no
// join discards rows it read.
func checkIDWritePlan(t *testing.T, what, plan, table string, n int) {
	t.Helper()
	scans := 0
	for _, l := range strings.Split(plan, "\n") {
		if strings.Contains(l, "Rows Removed by Join Filter") {
			t.Errorf("%s: a join discards rows it read (%s):\n%s", what, strings.TrimSpace(l), plan)
		}
		if !strings.Contains(l, " on "+table+" ") || strings.Contains(l, "Update on "+table) || strings.Contains(l, "Delete on "+table) {
			continue
		}
		scans++
		// items_run_state holds id too, third: a condition on id alone
		// walks all of it, and under the statistics of an emptied table it
		// is priced as items_pkey is.
		if !strings.Contains(l, "Index Scan using "+table+"_pkey") {
			t.Errorf("%s: %s read other than by %s_pkey (%s):\n%s", what, table, table, strings.TrimSpace(l), plan)
			continue
		}
		m := actualRowsRE.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("%s: no rows in %q", what, l)
		}
		rows, _ := strconv.Atoi(m[1])
		loops, _ := strconv.Atoi(m[2])
		if rows*loops > n {
			t.Errorf("%s: a scan of %s read %d rows %d times for %d rows named (%s):\n%s", what, table, rows, loops, n, strings.TrimSpace(l), plan)
		}
	}
	if scans == 0 {
		t.Errorf("%s: no scan of %s in the plan:\n%s", what, table, plan)
	}
}

// A claim hands its UPDATE the addresses of the rows its walk of
// items_ready locked, so the UPDATE reaches them by a TID scan whatever the
// statistics: by their IDs, after the VACUUM of an emptied items table, the
// planner looked each one up in items_run_state, a walk of that whole index
// per item (0.9 s for a claim of 2,000 from 20,000 items).
func TestClaimPlanAfterEmptiedVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := storeWithoutVacuum(t)
	run := mustRun(t, s, "p")
	emptyItems(t, s, schema, run)
	enqueue(t, s, run, make([]redrive.NewItem, 20000)...)
	_, plan, err := postgres.ClaimPlans(ctx, s, redrive.ClaimRequest{Owner: "o", Pipelines: []string{"p"}, Limit: 2000, Now: t0, LeaseUntil: t0.Add(time.Hour)}, false)
	if err != nil {
		t.Fatal(err)
	}
	var target string
	for _, l := range strings.Split(plan, "\n") {
		if strings.Contains(l, " on items ") && !strings.Contains(l, "Update on items") && !strings.Contains(l, " on items c ") {
			target = strings.TrimSpace(l)
		}
	}
	if !strings.HasPrefix(target, "->  Tid Scan on items") {
		t.Errorf("the claim's UPDATE reaches its items by %q, want a TID scan:\n%s", target, plan)
	}
	if ls := claim(t, s, "p", 2000, t0); len(ls) != 2000 {
		t.Errorf("claimed %d items, want 2000", len(ls))
	}
}

// The statements that walk an index to lock the items they then write
// (the promotion of waiting items, ClaimExpired, retention's delete) hand
// the write the addresses of the rows they locked, so it reaches them by a
// TID scan whatever the statistics. By their IDs, after the VACUUM of an
// emptied items table, the write walked a whole index (items_waiting,
// items_run_state, items_succeeded_updated) and filtered it by the IDs: a
// cost per claim, rescue or retention batch that grew with the backlog.
// Checked on a table emptied and vacuumed so, then once analyzed.
func TestLockingWritesAfterEmptiedVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := storeWithoutVacuum(t)
	run := mustRun(t, s, "p")
	emptyItems(t, s, schema, run)
	enqueue(t, s, run, make([]redrive.NewItem, 30000)...)
	var ls []redrive.Lease
	for range 15 {
		ls = append(ls, claim(t, s, "p", 2000, t0)...)
	}
	if len(ls) != 30000 {
		t.Fatalf("claimed %d items, want 30000", len(ls))
	}
	// A third succeeds, a third waits on a backoff of an hour, a third
	// stays running until its lease expires.
	var cs []redrive.Completion
	for i, l := range ls {
		switch i % 3 {
		case 0:
			cs = append(cs, done(l, redrive.StateSucceeded, t0))
		case 1:
			c := done(l, redrive.StatePending, t0)
			c.NextAt = t0.Add(time.Hour)
			c.Record.Outcome, c.Record.Class, c.Record.Error = redrive.OutcomeRetry, "transient", "later"
			cs = append(cs, c)
		}
	}
	for b := range slices.Chunk(cs, 2000) {
		ok, err := s.Complete(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.Index(ok, false); i >= 0 {
			t.Fatalf("completion of item %d not applied", b[i].ItemID)
		}
	}
	now := t0.Add(2 * time.Hour)
	expired := redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 2000, Now: now, LeaseUntil: now.Add(time.Minute)}
	check := func(when string) {
		t.Helper()
		plans, err := postgres.LockingWritePlans(ctx, s, now, expired, t0.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"promote", "claim expired", "delete succeeded"} {
			plan := plans[name]
			var scans []string
			for _, l := range strings.Split(plan, "\n") {
				if strings.Contains(l, "Scan") && strings.Contains(l, " on items") {
					scans = append(scans, strings.TrimSpace(l))
				}
			}
			if name == "claim expired" {
				// The expired batches' items looked up by ID, the expired
				// ones locked by ID, then written by address.
				if len(scans) != 3 || strings.Count(plan, "Index Cond: (id = ANY") < 2 ||
					!strings.HasPrefix(scans[0], "->  Index Scan using items_pkey") || !strings.HasPrefix(scans[1], "->  Index Scan using items_pkey") ||
					!strings.HasPrefix(scans[2], "->  Tid Scan on items") {
					t.Errorf("%s, %s: want the batches' items and the expired ones by ID, then a TID scan of items, got %q:\n%s", when, name, scans, plan)
				}
				continue
			}
			// One walk that locks, one scan that reaches what it locked.
			if len(scans) != 2 || !slices.ContainsFunc(scans, func(l string) bool { return strings.HasPrefix(l, "->  Tid Scan on items") }) {
				t.Errorf("%s, %s: want the walk and a TID scan of items, got %q:\n%s", when, name, scans, plan)
			}
		}
	}
	check("emptied and vacuumed")
	if _, err := s.Pool().Exec(ctx, `ANALYZE `+pgx.Identifier{schema, "items"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	check("then analyzed")
	// The statements do their work: 2,000 expired leases taken over, the
	// 10,000 waiting items promoted and claimable, 2,000 succeeded items
	// deleted.
	got, err := s.ClaimExpired(ctx, expired)
	if err != nil || len(got) != 2000 {
		t.Fatalf("ClaimExpired: %d leases, %v; want 2000", len(got), err)
	}
	if ls := claim(t, s, "p", 2000, now); len(ls) != 2000 {
		t.Errorf("claimed %d promoted items, want 2000", len(ls))
	}
	if n, err := s.DeleteSucceeded(ctx, t0.Add(time.Minute), 2000); err != nil || n != 2000 {
		t.Errorf("DeleteSucceeded: %d, %v; want 2000", n, err)
	}
}

// A claim of notifications walks outbox_due in order and hands its UPDATE
// the addresses of the rows it locked, whatever the statistics. After the
// VACUUM of an emptied outbox (a drained outbox whose pages were kept),
// the walk sorted every due notification to take the first ones and the
// UPDATE filtered every pending one of outbox_status by the locked IDs:
// 80 ms for a claim of 100 behind 100,000 pending notifications.
func TestNotificationClaimAfterEmptiedVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := storeWithoutVacuum(t)
	outbox := pgx.Identifier{schema, "outbox"}.Sanitize()
	insert := func(n int) { t.Helper(); insertNotifications(t, s, outbox, n, "pending") }
	insert(20000)
	emptyAndVacuum(t, s, outbox)
	insert(20000)
	req := redrive.ClaimRequest{Owner: "w", Pipelines: []string{"p"}, Limit: 100, Now: t0.Add(time.Hour), LeaseUntil: t0.Add(2 * time.Hour)}
	check := func(when string) {
		t.Helper()
		plan, err := postgres.NotificationClaimPlan(ctx, s, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(plan, "\n") {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "->  Sort ") {
				t.Errorf("%s: the walk sorts the due notifications (%s):\n%s", when, l, plan)
			}
			if strings.Contains(l, " on outbox ") && !strings.Contains(l, " on outbox c ") && !strings.Contains(l, "Update on") &&
				!strings.HasPrefix(l, "->  Tid Scan on outbox") {
				t.Errorf("%s: the UPDATE reaches its rows by %q, want a TID scan:\n%s", when, l, plan)
			}
		}
	}
	check("emptied and vacuumed")
	if _, err := s.Pool().Exec(ctx, `ANALYZE `+outbox); err != nil {
		t.Fatal(err)
	}
	check("then analyzed")
	// The claim takes the first due notifications, in next_at order.
	ns, err := s.ClaimNotifications(ctx, req)
	if err != nil || len(ns) != 100 {
		t.Fatalf("ClaimNotifications: %d, %v; want 100", len(ns), err)
	}
	var first int64
	if err := s.Pool().QueryRow(ctx, `SELECT min(id) FROM `+outbox+` WHERE lease_owner = ''`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if n.ID >= first {
			t.Fatalf("claimed notification %d, due after %d, which was left", n.ID, first)
		}
	}
}

// The operators' bulk actions write the items they selected and locked by
// ID, planned as a completion is: after the VACUUM of an emptied items
// table, Redrive joined every dead item with its selection (4 s for 1,000
// of 20,000 dead items), and RetryNow, CancelPending and Purge filtered
// every pending or dead entry of an index by the IDs they had selected.
// Checked on a table emptied and vacuumed so, then once analyzed: each
// write reads items by items_pkey, no more rows than it names, and no join
// discards rows it read; then each action does its work.
func TestBulkActionsAfterEmptiedVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema, run, waiting, dead := bulkActionsFixture(t, 30000)
	now := t0.Add(time.Minute)
	check := func(when string) {
		t.Helper()
		plans, err := postgres.BulkWritePlans(ctx, s, waiting[:1000], dead[:1000], now)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"retry now", "cancel pending", "redrive", "redrive from", "purge"} {
			checkLeaseWritePlan(t, when+", "+name, plans[name], 1000)
		}
	}
	check("emptied and vacuumed")
	if _, err := s.Pool().Exec(ctx, `ANALYZE `+pgx.Identifier{schema, "items"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	check("then analyzed")

	// Each action takes the first items of its selection in ID order.
	count := func(what string, got int, err error, want int) {
		t.Helper()
		if err != nil || got != want {
			t.Fatalf("%s: %d, %v; want %d", what, got, err, want)
		}
	}
	n, err := s.RetryNow(ctx, redrive.ItemFilter{Pipeline: "p", Limit: 1000}, now)
	count("RetryNow", n, err, 1000)
	n, err = s.CancelPending(ctx, redrive.ItemFilter{Pipeline: "p", DueAfter: now, Limit: 1000},
		redrive.Reason{Class: "canceled", Error: "by an operator", At: now})
	count("CancelPending", n, err, 1000)
	n, err = s.Redrive(ctx, redrive.ItemFilter{Pipeline: "p", Limit: 1000}, now, time.Second)
	count("Redrive", n, err, 1000)
	n, err = s.RedriveFrom(ctx, redrive.RedriveFromRequest{Filter: redrive.ItemFilter{Pipeline: "p", Limit: 1000}, Stage: "a", Now: now})
	count("RedriveFrom", n, err, 1000)
	n, err = s.Purge(ctx, redrive.ItemFilter{Pipeline: "p", Limit: 1000})
	count("Purge", n, err, 1000)
	for _, c := range []struct {
		what  string
		ids   []int64
		state redrive.State
	}{
		{"retried now", waiting[:1000], redrive.StatePending},
		{"canceled", waiting[1000:2000], redrive.StateCanceled},
		{"redriven", dead[:1000], redrive.StatePending},
		{"redriven from a", dead[1000:2000], redrive.StatePending},
	} {
		items, err := s.ListItems(ctx, redrive.ItemFilter{IDs: c.ids, Limit: len(c.ids)})
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != len(c.ids) {
			t.Fatalf("%s: listed %d items, want %d", c.what, len(items), len(c.ids))
		}
		for i, it := range items {
			want := now
			if c.what == "redriven" {
				want = now.Add(time.Duration(i) * time.Second)
			}
			if it.State != c.state || (c.state == redrive.StatePending && !it.NextAt.Equal(want)) {
				t.Fatalf("%s: item %d is %s due %v, want %s due %v", c.what, it.ID, it.State, it.NextAt, c.state, want)
			}
		}
	}
	got, err := s.Count(ctx, redrive.ItemFilter{IDs: dead[2000:3000]})
	count("purged items left", got, err, 0)
	r, err := s.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Counts.Purged != 1000 || !r.Counts.AddsUp() {
		t.Errorf("run counts %+v, want 1000 purged and the counts adding up", r.Counts)
	}
	// Without a limit, Purge deletes in one statement everything its
	// filter selects: the 7,000 items still dead.
	n, err = s.Purge(ctx, redrive.ItemFilter{Pipeline: "p"})
	count("Purge without a limit", n, err, 7000)
	got, err = s.Count(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}})
	count("dead items left", got, err, 0)
	if r, err = s.GetRun(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if r.Counts.Purged != 8000 || r.Counts.Canceled != 1000 || !r.Counts.AddsUp() {
		t.Errorf("run counts %+v, want 8,000 purged, 1,000 canceled kept and the counts adding up", r.Counts)
	}
}

// bulkActionsFixture makes a store of n items (of one run, the one
// returned) enqueued after the VACUUM of its emptied items table: a third
// succeeded, a third pending on a backoff of an hour (waiting, in ID
// order) and a third dead (dead, in ID order).
func bulkActionsFixture(t testing.TB, n int) (s *postgres.Store, schema string, run redrive.Run, waiting, dead []int64) {
	t.Helper()
	ctx := context.Background()
	s, schema = storeWithoutVacuum(t)
	run = mustRun(t, s, "p")
	emptyItems(t, s, schema, run)
	enqueue(t, s, run, make([]redrive.NewItem, n)...)
	var ls []redrive.Lease
	for len(ls) < n {
		ls = append(ls, claim(t, s, "p", 2000, t0)...)
	}
	// A third succeeds, a third waits on a backoff of an hour, a third dies.
	var cs []redrive.Completion
	for i, l := range ls {
		c := done(l, redrive.StateSucceeded, t0)
		switch i % 3 {
		case 1:
			c.State, c.NextAt = redrive.StatePending, t0.Add(time.Hour)
			c.Record.Outcome, c.Record.Class, c.Record.Error = redrive.OutcomeRetry, "transient", "later"
			waiting = append(waiting, l.Item.ID)
		case 2:
			c.State = redrive.StateDead
			c.Record.Outcome, c.Record.Class, c.Record.Error = redrive.OutcomeDead, "permanent", "boom"
			c.Reason = &redrive.Reason{Stage: "a", Class: "permanent", Error: "boom", Attempts: 1, At: t0}
			dead = append(dead, l.Item.ID)
		}
		cs = append(cs, c)
	}
	for b := range slices.Chunk(cs, 2000) {
		ok, err := s.Complete(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.Index(ok, false); i >= 0 {
			t.Fatalf("completion of item %d not applied", b[i].ItemID)
		}
	}
	slices.Sort(waiting)
	slices.Sort(dead)
	return s, schema, run, waiting, dead
}

// insertNotifications inserts n notifications of status into outbox, due
// a millisecond apart, as a dependency that was down leaves them.
func insertNotifications(t testing.TB, s *postgres.Store, outbox string, n int, status string) {
	t.Helper()
	if _, err := s.Pool().Exec(context.Background(), `INSERT INTO `+outbox+` (event, pipeline, run_id, occurred_at, next_at, updated_at, status)
		SELECT 'item.dead', 'p', 1, $1::timestamptz, $1::timestamptz + g * interval '1 ms', $1::timestamptz, $3
		FROM generate_series(1, $2::int) g`, t0, n, status); err != nil {
		t.Fatal(err)
	}
}

// RedriveNotifications locks the dead notifications it selects, then
// writes them by ID. In one statement, after the VACUUM of a drained
// outbox, the planner ran the locking selection once per dead
// notification, each time sorting them all, and each run skipped the rows
// the statement had already redriven and locked the next ones: a redrive
// of 1,000 of 20,000 dead notifications redrove all 20,000, in 64 s.
// Checked emptied and vacuumed, then analyzed: the write reads the outbox
// by its primary key, no more rows than it names; then the redrive takes
// the first 1,000 dead notifications in ID order and leaves the rest dead.
func TestNotificationRedriveAfterEmptiedVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := storeWithoutVacuum(t)
	outbox := pgx.Identifier{schema, "outbox"}.Sanitize()
	insertNotifications(t, s, outbox, 20000, "pending")
	emptyAndVacuum(t, s, outbox)
	insertNotifications(t, s, outbox, 20000, "dead")
	ns, err := s.ListNotifications(ctx, redrive.NotificationFilter{Limit: 1000})
	if err != nil || len(ns) != 1000 {
		t.Fatalf("ListNotifications: %d, %v; want 1000", len(ns), err)
	}
	ids := make([]int64, len(ns))
	for i, n := range ns {
		ids[i] = n.ID
	}
	now := t0.Add(time.Hour)
	check := func(when string) {
		t.Helper()
		plan, err := postgres.NotificationRedrivePlan(ctx, s, ids, now)
		if err != nil {
			t.Fatal(err)
		}
		checkIDWritePlan(t, when, plan, "outbox", len(ids))
	}
	check("emptied and vacuumed")
	n, err := s.RedriveNotifications(ctx, redrive.NotificationFilter{Limit: 1000}, now)
	if err != nil || n != 1000 {
		t.Fatalf("RedriveNotifications: %d, %v; want 1000", n, err)
	}
	if _, err := s.Pool().Exec(ctx, `ANALYZE `+outbox); err != nil {
		t.Fatal(err)
	}
	check("then analyzed")
	c, err := s.CountNotifications(ctx, redrive.NotificationFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Pending != 1000 || c.Dead != 19000 {
		t.Fatalf("after the redrive: %+v; want 1,000 pending and 19,000 dead", c)
	}
	var first int64
	if err := s.Pool().QueryRow(ctx, `SELECT min(id) FROM `+outbox+` WHERE status = 'dead'`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if first <= ids[len(ids)-1] {
		t.Errorf("notification %d is still dead, before %d, the last one redriven", first, ids[len(ids)-1])
	}
}

// SettleNotifications finds the notifications it settles by ID, as a
// completion finds its items. Joined by ID alone, with a condition on the
// status, after the VACUUM of a drained outbox the planner walked every
// pending notification for each settle (16 – 24 ms for 100 results behind
// 60,000 pending). Checked emptied and vacuumed, then analyzed: the
// outbox is read by its primary key, no more rows than it names; then the
// settle applies each result once, and a repeat of it (a stale lease
// token) none.
func TestNotificationSettleAfterEmptiedVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := storeWithoutVacuum(t)
	outbox := pgx.Identifier{schema, "outbox"}.Sanitize()
	insertNotifications(t, s, outbox, 20000, "pending")
	emptyAndVacuum(t, s, outbox)
	insertNotifications(t, s, outbox, 20000, "pending")
	now := t0.Add(time.Hour)
	ns, err := s.ClaimNotifications(ctx, redrive.ClaimRequest{Owner: "w", Pipelines: []string{"p"}, Limit: 100, Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(ns) != 100 {
		t.Fatalf("ClaimNotifications: %d, %v; want 100", len(ns), err)
	}
	ids, tokens := make([]int64, len(ns)), make([]int64, len(ns))
	rs := make([]redrive.DeliveryResult, len(ns))
	for i, n := range ns {
		ids[i], tokens[i] = n.ID, n.Token
		rs[i] = redrive.DeliveryResult{ID: n.ID, Token: n.Token, Status: redrive.NotificationDelivered, Attempts: 1, Now: now}
		if i%2 == 1 {
			rs[i].Status, rs[i].NextAt, rs[i].Error = redrive.NotificationPending, now.Add(time.Minute), "503"
		}
	}
	check := func(when string) {
		t.Helper()
		plan, err := postgres.NotificationSettlePlan(ctx, s, ids, tokens, now)
		if err != nil {
			t.Fatal(err)
		}
		checkIDWritePlan(t, when, plan, "outbox", len(ids))
	}
	check("emptied and vacuumed")
	if _, err := s.Pool().Exec(ctx, `ANALYZE `+outbox); err != nil {
		t.Fatal(err)
	}
	check("then analyzed")
	for round, want := range []bool{true, false} {
		applied, err := s.SettleNotifications(ctx, rs)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range applied {
			if a != want {
				t.Fatalf("settle %d: result %d (notification %d) applied %v, want %v", round+1, i, rs[i].ID, a, want)
			}
		}
	}
	c, err := s.CountNotifications(ctx, redrive.NotificationFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Delivered != 50 || c.Pending != 19950 {
		t.Errorf("after the settle: %+v; want 50 delivered and 19,950 pending", c)
	}
}

// DeleteDelivered walks the delivered notifications in delivery order
// (outbox_delivered, migration 0026) whatever the statistics say. Taking
// the first delivered ones in ID order, after the VACUUM of a drained
// outbox, every batch read and sorted all the delivered notifications (31
// ms per batch of 2,000 behind 200,000). Checked emptied and vacuumed,
// then analyzed, with older pending notifications ahead of the delivered
// ones in ID order: a batch reads no more delivered notifications than it
// deletes and sorts nothing; then retention deletes exactly those
// delivered before its cutoff.
func TestDeleteDeliveredAfterEmptiedVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := storeWithoutVacuum(t)
	outbox := pgx.Identifier{schema, "outbox"}.Sanitize()
	insertNotifications(t, s, outbox, 20000, "pending")
	emptyAndVacuum(t, s, outbox)
	insertNotifications(t, s, outbox, 5000, "pending")
	insertNotifications(t, s, outbox, 19000, "delivered")
	insertNotifications(t, s, outbox, 100, "dead")
	// The last 1,000 delivered after the cutoff: kept.
	insertNotifications(t, s, outbox, 1000, "delivered")
	if _, err := s.Pool().Exec(ctx, `UPDATE `+outbox+` SET updated_at = $1
		WHERE id > (SELECT max(id) FROM `+outbox+`) - 1000`, t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	cutoff := t0.Add(time.Hour)
	check := func(when string) {
		t.Helper()
		plan, err := postgres.DeleteDeliveredPlan(ctx, s, cutoff, 2000)
		if err != nil {
			t.Fatal(err)
		}
		walks := 0
		for _, l := range strings.Split(plan, "\n") {
			if strings.Contains(l, "Sort") || strings.Contains(l, "Seq Scan") || strings.Contains(l, "Bitmap") {
				t.Errorf("%s: the batch sorts or scans the outbox (%s):\n%s", when, strings.TrimSpace(l), plan)
			}
			if !strings.Contains(l, "using outbox_delivered") {
				continue
			}
			walks++
			if m := actualRowsRE.FindStringSubmatch(l); m == nil || m[1] != "2000" || m[2] != "1" {
				t.Errorf("%s: the walk of outbox_delivered read other than the batch's 2,000 rows once (%s):\n%s", when, strings.TrimSpace(l), plan)
			}
		}
		if walks != 1 {
			t.Errorf("%s: %d walks of outbox_delivered, want 1:\n%s", when, walks, plan)
		}
	}
	check("emptied and vacuumed")
	if _, err := s.Pool().Exec(ctx, `ANALYZE `+outbox); err != nil {
		t.Fatal(err)
	}
	check("then analyzed")
	total := 0
	for {
		n, err := s.DeleteDelivered(ctx, cutoff, 2000)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		total += n
	}
	c, err := s.CountNotifications(ctx, redrive.NotificationFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if total != 19000 || c.Delivered != 1000 || c.Pending != 5000 || c.Dead != 100 {
		t.Errorf("retention deleted %d, left %+v; want 19,000 deleted, 1,000 delivered, 5,000 pending and 100 dead left", total, c)
	}
}
