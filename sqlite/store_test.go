package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/storetest"
)

func openTest(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) redrive.Store {
		return openTest(t, filepath.Join(t.TempDir(), "redrive.db"))
	})
}

func TestMigrations(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "redrive.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := s.MigrationStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	files, err := migrationFiles()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || len(ms) != len(files) {
		t.Fatalf("MigrationStatus = %+v, want %d migrations", ms, len(files))
	}
	first := ms
	for _, m := range ms {
		if !m.Applied || m.AppliedAt.IsZero() || m.Version == 0 || m.Name == "" {
			t.Errorf("migration %+v not applied", m)
		}
	}
	if ms[0].Version != 1 || ms[0].Name != "init" {
		t.Errorf("first migration = %+v", ms[0])
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopening applies nothing again.
	s = openTest(t, path)
	ms, err = s.MigrationStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ms {
		if !ms[i].AppliedAt.Equal(first[i].AppliedAt) {
			t.Errorf("migration %d reapplied: %v, then %v", ms[i].Version, first[i].AppliedAt, ms[i].AppliedAt)
		}
	}
	var n int
	if err := s.r.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(files) {
		t.Errorf("schema_migrations has %d rows (%v), want %d", n, err, len(files))
	}
}

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "redrive.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	now := storetest.Base
	run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{Name: "keep"}, now)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Now: now,
		Items: []redrive.NewItem{{Key: "k", Payload: []byte("hello")}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, path)
	got, created, err := s.CreateRun(ctx, "p", redrive.RunOptions{Name: "keep"}, now.Add(time.Hour))
	if err != nil || created || got.ID != run.ID || got.Counts.Total != 1 {
		t.Fatalf("resume after reopen = %+v, %v, %v", got, created, err)
	}
	it, err := s.GetItem(ctx, res[0].ID)
	if err != nil || string(it.Payload) != "hello" || it.Key != "k" || !it.EnqueuedAt.Equal(now) {
		t.Fatalf("item after reopen = %+v, %v", it, err)
	}
}

func TestPragmas(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "redrive.db"))
	var mode string
	if err := s.r.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || !strings.EqualFold(mode, "wal") {
		t.Errorf("read pool journal_mode = %q, %v; want wal", mode, err)
	}
	if err := s.w.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || !strings.EqualFold(mode, "wal") {
		t.Errorf("write conn journal_mode = %q, %v; want wal", mode, err)
	}
	var sync, busy int
	if err := s.w.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil || sync != 1 {
		t.Errorf("synchronous = %d, %v; want 1 (NORMAL)", sync, err)
	}
	if err := s.w.QueryRow(`PRAGMA busy_timeout`).Scan(&busy); err != nil || busy != 5000 {
		t.Errorf("busy_timeout = %d, %v; want 5000", busy, err)
	}
	// Reads cannot write.
	if _, err := s.r.Exec(`DELETE FROM items`); err == nil {
		t.Errorf("read pool accepted a write")
	}
}

func TestClaimUsesIndex(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "redrive.db"))
	req := redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 10,
		Exclude: []redrive.StageKey{{Pipeline: "p", Stage: "b"}}}
	where, args := claimWhere(req, []string{"state = 'pending'", "ready = 1", "next_at <= ?"}, []any{int64(0)})
	claim := `SELECT id FROM items INDEXED BY items_ready WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY priority DESC, order_at, id LIMIT 10`
	promote := promoteSQL[strings.Index(promoteSQL, "(SELECT")+1 : len(promoteSQL)-1]
	for _, c := range []struct {
		name, q, index string
		args           []any
	}{
		{"claim", claim, "items_ready", args},
		{"promote", promote, "items_waiting", []any{int64(0), 10}},
	} {
		rows, err := s.r.Query(`EXPLAIN QUERY PLAN `+c.q, c.args...)
		if err != nil {
			t.Fatal(c.name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		joined := strings.Join(plan, "; ")
		if !strings.Contains(joined, c.index) || strings.Contains(joined, "TEMP B-TREE") {
			t.Errorf("%s plan = %s; want a walk of %s without a sort", c.name, joined, c.index)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, ":memory:"); err == nil {
		t.Error("Open(:memory:) succeeded")
	}
	if _, err := Open(ctx, filepath.Join(t.TempDir(), "no", "such", "dir", "x.db")); err == nil {
		t.Error("Open in a missing directory succeeded")
	}
	if _, err := Open(ctx, filepath.Join(t.TempDir(), "x.db"), Options{}, Options{}); err == nil {
		t.Error("Open with two Options succeeded")
	}
}
