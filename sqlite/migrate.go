package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/migrations"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one versioned schema change, as MigrationStatus reports it.
type Migration = redrive.Migration

func migrationFiles() ([]migrations.File, error) { return migrations.Load(migrationFS, "migrations") }

const createMigrations = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
)`

// migrate applies pending migrations in one write transaction.
func (s *Store) migrate(ctx context.Context) error {
	files, err := migrationFiles()
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	return s.writeTx(ctx, "migrate", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, createMigrations); err != nil {
			return err
		}
		applied, err := appliedMigrations(ctx, tx)
		if err != nil {
			return err
		}
		for _, m := range files {
			if _, ok := applied[m.Version]; ok {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %d %s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, time.Now().UnixNano()); err != nil {
				return fmt.Errorf("migration %d %s: %w", m.Version, m.Name, err)
			}
		}
		return nil
	})
}

type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func appliedMigrations(ctx context.Context, q queryer) (map[int]time.Time, error) {
	rows, err := q.QueryContext(ctx, `SELECT version, applied_at FROM schema_migrations`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[int]time.Time{}
	for rows.Next() {
		var v int
		var at int64
		if err := rows.Scan(&v, &at); err != nil {
			return nil, err
		}
		m[v] = time.Unix(0, at).UTC()
	}
	return m, rows.Err()
}

// MigrationStatus lists the migrations embedded in this build, in version
// order, with whether and when each was applied to the file.
func (s *Store) MigrationStatus(ctx context.Context) ([]Migration, error) {
	files, err := migrationFiles()
	if err != nil {
		return nil, fmt.Errorf("sqlite: migration status: %w", err)
	}
	applied, err := appliedMigrations(ctx, s.r)
	if err != nil {
		return nil, fmt.Errorf("sqlite: migration status: %w", err)
	}
	out := make([]Migration, 0, len(files))
	for _, f := range files {
		at, ok := applied[f.Version]
		out = append(out, Migration{Version: f.Version, Name: f.Name, Applied: ok, AppliedAt: at})
	}
	return out, nil
}
