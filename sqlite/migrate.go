package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one versioned schema change.
type Migration struct {
	// Version orders migrations; it is the number the file name starts with.
	Version int
	// Name is the rest of the file name, without the extension.
	Name string
	// Applied reports whether the migration has been applied to the file.
	Applied bool
	// AppliedAt is when it was applied, or the zero time.
	AppliedAt time.Time
}

type migrationFile struct {
	version int
	name    string
	sql     string
}

func migrationFiles() ([]migrationFile, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migrationFile
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "migrations/"), ".sql")
		num, name, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration file %s: no version number", n)
		}
		b, err := migrationFS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, migrationFile{version: v, name: name, sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

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
			if _, ok := applied[m.version]; ok {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %d %s: %w", m.version, m.name, err)
			}
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.version, m.name, time.Now().UnixNano()); err != nil {
				return fmt.Errorf("migration %d %s: %w", m.version, m.name, err)
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
		at, ok := applied[f.version]
		out = append(out, Migration{Version: f.version, Name: f.name, Applied: ok, AppliedAt: at})
	}
	return out, nil
}
