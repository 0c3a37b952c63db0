package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/bench"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/sqlite"
)

// bench --shape start times every probe into an idle engine; on
// PostgreSQL the engine hears of each by a notification, so the time from
// the commit to the notification is measured too.
func TestBenchStart(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, args []string, notified bool) {
		r := runCLI(t, nil, append(args, "bench", "--shape", "start", "--probes", "8", "--json")...)
		if r.code != 0 {
			t.Fatalf("bench --shape start: %v", r)
		}
		var res bench.StartResult
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		if res.Probes != 8 || res.StartP50 <= 0 || res.StartP99 < res.StartP50 || res.EnqueueP50 <= 0 || res.ClaimP50 <= 0 {
			t.Errorf("result: %+v", res)
		}
		if res.StartP50 < res.CommittedP50 {
			t.Errorf("enqueue-to-start p50 %.2f ms is below commit-to-start p50 %.2f ms", res.StartP50, res.CommittedP50)
		}
		if want := map[bool]int{true: 8, false: 0}[notified]; res.Notified != want {
			t.Errorf("%d probes were notified, want %d", res.Notified, want)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		check(t, nil, false)
	})
	t.Run("postgres", func(t *testing.T) {
		url, _ := pgtest.NewSchema(t)
		check(t, []string{"--db", url}, true)
	})
}

// bench --rounds reports every round with the database's size and the
// succeeded items still held.
func TestBenchRoundsSize(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, "bench", "--items", "200", "--rounds", "2", "--workers", "4", "--batch", "50", "--json")
	if r.code != 0 {
		t.Fatalf("bench --rounds: %v", r)
	}
	var rs bench.RoundsResult
	if err := json.Unmarshal([]byte(r.stdout), &rs); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if len(rs.Rounds) != 2 || len(rs.Sizes) != 2 || rs.Processed != 400 || rs.Sizes[0] <= 0 || rs.Sizes[1] <= 0 {
		t.Errorf("result: %+v", rs)
	}
	// The first round's 200 items and their attempts are in the size
	// though the write-ahead log still holds them: the file alone would
	// be a new store's.
	if empty := newSQLiteSize(t); rs.Sizes[0] <= empty {
		t.Errorf("database after round 1: %d bytes, not more than a new store's %d", rs.Sizes[0], empty)
	}
	// Every item allocates (its task and lease at least), and no heap
	// object is smaller than 8 bytes.
	for i, rd := range rs.Rounds {
		if c := rd.Engine; c.Allocs < 2 || c.Bytes < 8*c.Allocs {
			t.Errorf("round %d: %.1f allocations and %.0f bytes per item", i+1, c.Allocs, c.Bytes)
		}
	}
	if len(rs.Held) != 2 || rs.Held[0] < 0 || rs.Held[0] > 200 || rs.Held[1] < 0 || rs.Held[1] > 400 {
		t.Errorf("succeeded items held after the rounds: %v, want 2 counts of at most 200 and 400", rs.Held)
	}
	if n := strings.Count(r.stderr, "database "); n != 2 {
		t.Errorf("progress reported %d rounds, want 2:\n%s", n, r.stderr)
	}
	if n := strings.Count(r.stderr, "succeeded held "); n != 2 {
		t.Errorf("progress reported the items held after %d rounds, want 2:\n%s", n, r.stderr)
	}
	// SQLite's work is all this process's; a round this short may take
	// less CPU than the clock's tick of 10 ms, and then has no ratio.
	first, last := rs.Rounds[0].Engine.ProcessCPU, rs.Rounds[1].Engine.ProcessCPU
	want := 0.0
	if first > 0 {
		want = last / first
	}
	if math.Abs(rs.CPURatio-want) > 1e-9 {
		t.Errorf("CPU per item, last / first: %v, want %v (%v / %v)", rs.CPURatio, want, last, first)
	}
}

// bench compares the engine with the audited bare loop on both stores,
// measured before and after it, and says where each item's time went. Not
// in parallel with the other tests: its loops take both cores for a
// moment, which would skew the timing-sensitive TestBenchStart.
func TestBenchAudited(t *testing.T) {
	check := func(t *testing.T, args []string, pg bool) {
		r := runCLI(t, nil, append(args, "bench", "--items", "600", "--workers", "4", "--batch", "100", "--insert-rounds", "0", "--json")...)
		if r.code != 0 {
			t.Fatalf("bench: %v", r)
		}
		var res bench.Result
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		if res.Succeeded != 600 || res.AuditedLoops != bench.AuditedLoops || res.AuditedBefore <= 0 || res.AuditedAfter <= 0 {
			t.Errorf("result: %+v", res)
		}
		if want := res.ItemsPerSecond / ((res.AuditedBefore + res.AuditedAfter) / 2); res.WorkOverAudited != want {
			t.Errorf("work / audited = %v, want %v", res.WorkOverAudited, want)
		}
		// An audited claim takes a whole batch unless the due jobs left
		// are fewer: on PostgreSQL the loops race for the tail, so each
		// may take one partial batch there, which bounds the mean claim.
		atLeast := 600.0 / float64(600/100+bench.AuditedLoops)
		if res.Audited.ClaimBatch < atLeast || res.Audited.ClaimBatch > 100 || res.Engine.CompleteBatch <= 0 || res.Engine.ClaimWall <= 0 {
			t.Errorf("costs: engine %+v, audited %+v", res.Engine, res.Audited)
		}
		if (res.BarePerSecond > 0) != pg {
			t.Errorf("the bare SQL queue of PostgreSQL: %v items/s", res.BarePerSecond)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		check(t, nil, false)
	})
	t.Run("postgres", func(t *testing.T) {
		url, _ := pgtest.NewSchema(t)
		check(t, []string{"--db", url}, true)
	})
}

// bench --ratio-rounds measures the engine against the audited bare loop
// once per round, each later round on a store of its own that it removes
// after, and prints the median; --checkpoint runs on PostgreSQL alone.
func TestBenchRatioRounds(t *testing.T) {
	check := func(t *testing.T, args []string, flags ...string) {
		args = append(args, "bench", "--items", "400", "--workers", "4", "--batch", "100", "--insert-rounds", "0",
			"--ratio-rounds", "3", "--json")
		r := runCLI(t, nil, append(args, flags...)...)
		if r.code != 0 {
			t.Fatalf("bench --ratio-rounds 3: %v", r)
		}
		var res bench.Result
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		rs := res.WorkOverAuditedRounds
		if len(rs) != 3 || rs[0] != res.WorkOverAudited {
			t.Fatalf("rounds %v, want 3 with the first %v", rs, res.WorkOverAudited)
		}
		for _, x := range rs {
			if x <= 0 {
				t.Errorf("a round's ratio is %v", x)
			}
		}
		sorted := slices.Sorted(slices.Values(rs))
		if res.WorkOverAuditedMedian != sorted[1] {
			t.Errorf("median %v of %v", res.WorkOverAuditedMedian, rs)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		check(t, nil)
		for _, args := range [][]string{
			{"bench", "--ratio-rounds", "0"},
			{"bench", "--ratio-rounds", "2", "--stages", "2"},
			{"bench", "--ratio-rounds", "2", "--shape", "deaths"},
			{"bench", "--checkpoint"},
		} {
			r := runCLI(t, nil, args...)
			if r.code != 2 || !strings.Contains(r.stderr, "--"+strings.TrimPrefix(args[1], "--")) {
				t.Errorf("%v: %v, want exit 2 naming %s", args, r, args[1])
			}
		}
	})
	t.Run("postgres", func(t *testing.T) {
		url, schema := pgtest.NewSchema(t)
		check(t, []string{"--db", url, "--pg-schema", schema}, "--checkpoint")
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var left int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1 || '\_round%'`,
			schema).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left != 0 {
			t.Errorf("%d schemas of later rounds left behind", left)
		}
		// A schema that a round would use and drop, made by someone else,
		// is refused and kept.
		taken := schema + "_round2"
		if _, err := conn.Exec(context.Background(), `CREATE SCHEMA `+pgx.Identifier{taken}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		defer conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{taken}.Sanitize())
		r := runCLI(t, nil, "--db", url, "--pg-schema", schema, "bench", "--items", "200", "--workers", "4", "--batch", "100",
			"--insert-rounds", "0", "--ratio-rounds", "2")
		if r.code != 1 || !strings.Contains(r.stderr, `schema "`+taken+`" exists`) {
			t.Errorf("bench --ratio-rounds 2 beside a schema %s: %v, want exit 1 naming it", taken, r)
		}
		var kept bool
		if err := conn.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, taken).Scan(&kept); err != nil || !kept {
			t.Errorf("schema %s dropped (%v)", taken, err)
		}
	})
}

// newSQLiteSize is the size of a newly migrated SQLite store, as SQLite
// counts its pages.
func newSQLiteSize(t *testing.T) int64 {
	t.Helper()
	path := filepath.Join(t.TempDir(), "new.db")
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var pages, size int64
	if err := db.QueryRow(`SELECT page_count, page_size FROM pragma_page_count(), pragma_page_size()`).Scan(&pages, &size); err != nil {
		t.Fatal(err)
	}
	return pages * size
}

// bench --shape deaths runs items that all die beside items that all
// succeed, and every death lands in the dead-letter queue in one error
// group, its message's item number and quoted field folded away.
func TestBenchDeaths(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, url, schema string) {
		args := []string{"--db", url, "bench", "--shape", "deaths", "--items", "300", "--workers", "8", "--batch", "100", "--json"}
		if schema != "" {
			args = append([]string{"--pg-schema", schema}, args...)
		}
		r := runCLI(t, nil, args...)
		if r.code != 0 {
			t.Fatalf("bench --shape deaths: %v", r)
		}
		var res bench.DeathsResult
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		if len(res.Deaths) != 2 || len(res.Successes) != 2 || res.DeathsPerSecond <= 0 || res.SuccessesPerSecond <= 0 ||
			res.Ratio != res.DeathsPerSecond/res.SuccessesPerSecond {
			t.Errorf("result: %+v", res)
		}
		ctx := context.Background()
		store, closeStore, err := openStoreWith(ctx, url, openOptions{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		defer closeStore()
		groups, err := store.FailureGroups(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}})
		if err != nil {
			t.Fatal(err)
		}
		want := "order <n>: schema mismatch: field <quoted> missing"
		if len(groups) != 1 || groups[0].Fingerprint != want || groups[0].Dead != 600 || groups[0].Failures != 600 {
			t.Errorf("error groups %+v, want one of %q with 600 dead items and 600 failures", groups, want)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		check(t, "sqlite:"+filepath.Join(t.TempDir(), "deaths.db"), "")
	})
	t.Run("postgres", func(t *testing.T) {
		url, schema := pgtest.NewSchema(t)
		check(t, url, schema)
	})
}
