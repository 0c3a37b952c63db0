package postgres_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// TestUpgradeFrom0001 migrates a schema that only 0001_init was applied to,
// with an item and an attempt in it: later migrations apply, and the old
// rows read back with no failed attempts and no configuration hash.
func TestUpgradeFrom0001(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.NewSchema(t)
	s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sql0001, err := os.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	q := `"` + schema + `"`
	for _, stmt := range []string{
		`CREATE SCHEMA IF NOT EXISTS ` + q,
		`CREATE TABLE ` + q + `.schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`,
		strings.ReplaceAll(string(sql0001), "{schema}", q),
		`INSERT INTO ` + q + `.schema_migrations (version, name) VALUES (1, 'init')`,
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
