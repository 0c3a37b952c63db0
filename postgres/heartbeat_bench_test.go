package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// BenchmarkHeartbeat measures what the run_counts update trigger costs a
// heartbeat, which changes no count. Three stores each hold 1,000 leased
// items: one as migrated (whose trigger a heartbeat skips, migration 0010),
// one with the trigger as migration 0001 made it (fired by every update),
// and one without the trigger. Each iteration extends all leases on the
// three, in rotating order; the benchmark reports µs per lease for each and
// their ratios to the store without the trigger, from one run.
func BenchmarkHeartbeat(b *testing.B) {
	const batch = 1000
	ctx := context.Background()
	stores := []struct {
		name string
		ddl  string // run in the store's schema, {items} its items table
		s    *postgres.Store
		refs []redrive.LeaseRef
		d    time.Duration
	}{
		{name: "migrated"},
		{name: "always", ddl: `DROP TRIGGER items_count_update ON {items};
			CREATE TRIGGER items_count_update AFTER UPDATE ON {items}
			REFERENCING OLD TABLE AS old_items NEW TABLE AS new_items FOR EACH STATEMENT
			EXECUTE FUNCTION {schema}.items_count()`},
		{name: "none", ddl: `DROP TRIGGER items_count_update ON {items}`},
	}
	for i := range stores {
		st := &stores[i]
		st.s = pgtest.OpenStore(b)
		q := pgx.Identifier{st.s.Schema()}.Sanitize()
		ddl := strings.NewReplacer("{items}", q+".items", "{schema}", q).Replace(st.ddl)
		if ddl != "" {
			if _, err := st.s.Pool().Exec(ctx, ddl); err != nil {
				b.Fatalf("%s: %v", st.name, err)
			}
		}
		run, _, err := st.s.CreateRun(ctx, "p", redrive.RunOptions{}, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a",
			Items: benchItems(batch), Now: time.Now()}); err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		ls, err := st.s.Claim(ctx, redrive.ClaimRequest{Owner: "bench", Pipelines: []string{"p"}, Limit: batch,
			Now: now, LeaseUntil: now.Add(time.Hour)})
		if err != nil || len(ls) != batch {
			b.Fatalf("claimed %d, %v; want %d", len(ls), err, batch)
		}
		for _, l := range ls {
			st.refs = append(st.refs, redrive.LeaseRef{ItemID: l.Item.ID, Token: l.Token})
		}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for j := range stores {
			st := &stores[(i+j)%len(stores)]
			start := time.Now()
			lost, err := st.s.Heartbeat(ctx, st.refs, time.Now().Add(time.Hour))
			st.d += time.Since(start)
			if err != nil || len(lost) > 0 {
				b.Fatalf("%s: heartbeat lost %d, %v", st.name, len(lost), err)
			}
		}
	}
	n := float64(b.N * batch)
	none := stores[2].d
	for _, st := range stores {
		b.ReportMetric(float64(st.d.Nanoseconds())/1e3/n, "µs/lease-"+st.name)
	}
	b.ReportMetric(float64(stores[0].d)/float64(none), "migrated/none")
	b.ReportMetric(float64(stores[1].d)/float64(none), "always/none")
}
