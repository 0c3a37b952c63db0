package postgres

import (
	"context"
	"embed"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/migrations"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one versioned schema migration, as MigrationStatus reports it.
type Migration = redrive.Migration

// migrationLockClass is the first key of the advisory lock that serializes
// migrators; the second is hashtext(schema).
const migrationLockClass = 0x72647276 // "rdrv"

// foldLockClass is the first key of the advisory lock that serializes
// Store.foldCounts; the second is hashtext(schema).
const foldLockClass = 0x72646663 // "rdfc"

func loadMigrations() ([]migrations.File, error) { return migrations.Load(migrationFS, "migrations") }

// Migrate applies the migrations that the schema lacks, creating the schema
// when needed. It holds a transaction-scoped advisory lock, so concurrent
// migrators (many processes starting at once) apply each migration once;
// all pending migrations apply in one transaction. Migrating an up-to-date
// schema does nothing.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.fail("migrate", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, migrationLockClass, s.schema); err != nil {
		return s.fail("migrate: lock", err)
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+s.q); err != nil {
		return s.fail("migrate: create schema", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.q+`.schema_migrations (
		version integer PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return s.fail("migrate: create schema_migrations", err)
	}
	applied := map[int]bool{}
	rows, err := tx.Query(ctx, `SELECT version FROM `+s.q+`.schema_migrations`)
	if err != nil {
		return s.fail("migrate: read versions", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return s.fail("migrate: read versions", err)
	}
	for _, v := range vs {
		applied[int(v)] = true
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if _, err := tx.Exec(ctx, strings.ReplaceAll(m.SQL, "{schema}", s.q)); err != nil {
			return s.fail(fmt.Sprintf("migrate: %04d_%s", m.Version, m.Name), err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+s.q+`.schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return s.fail("migrate: record version", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return s.fail("migrate: commit", err)
	}
	return s.backfillFingerprints(ctx)
}

// MigrationStatus lists the embedded migrations in version order and
// whether each has been applied to the store's schema.
func (s *Store) MigrationStatus(ctx context.Context) ([]Migration, error) {
	ms, err := loadMigrations()
	if err != nil {
		return nil, fmt.Errorf("postgres: migration status: %w", err)
	}
	out := make([]Migration, len(ms))
	for i, m := range ms {
		out[i] = Migration{Version: m.Version, Name: m.Name}
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.q+".schema_migrations").Scan(&exists); err != nil {
		return nil, s.fail("migration status", err)
	}
	if !exists {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT version, applied_at FROM `+s.q+`.schema_migrations`)
	if err != nil {
		return nil, s.fail("migration status", err)
	}
	defer rows.Close()
	at := map[int]time.Time{}
	for rows.Next() {
		var v int32
		var t time.Time
		if err := rows.Scan(&v, &t); err != nil {
			return nil, s.fail("migration status", err)
		}
		at[int(v)] = t.UTC()
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("migration status", err)
	}
	for i := range out {
		if t, ok := at[out[i].Version]; ok {
			out[i].Applied, out[i].AppliedAt = true, t
		}
	}
	return out, nil
}
