package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
)

// TestUpgradeFrom0001 opens a database that only 0001_init was applied to,
// with an item and an attempt in it: later migrations apply, and the old
// rows read back with no failed attempts and no configuration hash.
func TestUpgradeFrom0001(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	files, err := migrationFiles()
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		createMigrations,
		files[0].SQL,
		`INSERT INTO schema_migrations (version, name, applied_at) VALUES (1, 'init', 1)`,
		`INSERT INTO runs (id, pipeline, status, created_at) VALUES (1, 'p', 'running', 1)`,
		`INSERT INTO items (id, run_id, pipeline, stage, state, attempt, enqueued_at, next_at, updated_at)
			VALUES (1, 1, 'p', 'a', 'pending', 1, 1, 1, 1)`,
		`INSERT INTO attempts (item_id, run_id, pipeline, stage, stage_index, number, outcome, started_at, finished_at)
			VALUES (1, 1, 'p', 'a', 0, 1, 'retry', 1, 1)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, path)
	ms, err := s.MigrationStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if !m.Applied {
			t.Errorf("migration %04d %s not applied on open", m.Version, m.Name)
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
