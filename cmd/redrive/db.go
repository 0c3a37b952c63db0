package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/postgres"
	"github.com/redrive/redrive/sqlite"
	"github.com/redrive/redrive/storeurl"
	"github.com/spf13/cobra"
)

// Database selection. Every command that needs a store takes the root's
// persistent flags --db and --pg-schema; --db falls back to the
// REDRIVE_DATABASE_URL environment variable and then to sqlite:redrive.db.

const (
	envDatabaseURL   = "REDRIVE_DATABASE_URL"
	defaultDBURL     = "sqlite:redrive.db"
	defaultPGSchema  = "redrive"
	dbFlagUsage      = "database: sqlite:PATH, a *.db file, or postgres://USER:PASSWORD@HOST/DB (env " + envDatabaseURL + ")"
	pgSchemaUsage    = "PostgreSQL schema holding redrive's tables"
	migrateFirstHint = "run `redrive migrate up` first"
)

// dbConfig is the database the command line chose. The root command puts it
// in the command's context (see withDBConfig) so that openStore, whose
// signature other commands share, needs only the URL.
type dbConfig struct {
	// URL is the database URL from --db, REDRIVE_DATABASE_URL or the default.
	URL string
	// Schema is the PostgreSQL schema from --pg-schema.
	Schema string
}

type dbConfigKey struct{}

// withDBConfig returns ctx carrying c.
func withDBConfig(ctx context.Context, c dbConfig) context.Context {
	return context.WithValue(ctx, dbConfigKey{}, c)
}

// dbConfigFrom returns the configuration in ctx, or the defaults (with
// REDRIVE_DATABASE_URL applied) when there is none.
func dbConfigFrom(ctx context.Context) dbConfig {
	if c, ok := ctx.Value(dbConfigKey{}).(dbConfig); ok {
		return c
	}
	c := dbConfig{URL: defaultDBURL, Schema: defaultPGSchema}
	if v := os.Getenv(envDatabaseURL); v != "" {
		c.URL = v
	}
	return c
}

// addDBFlags adds the persistent --db and --pg-schema flags to root and a
// pre-run hook that resolves them into the command's context.
func addDBFlags(root *cobra.Command) {
	var c dbConfig
	root.PersistentFlags().StringVar(&c.URL, "db", defaultDBURL, dbFlagUsage)
	root.PersistentFlags().StringVar(&c.Schema, "pg-schema", defaultPGSchema, pgSchemaUsage)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		r := c
		if !cmd.Flags().Changed("db") {
			if v := os.Getenv(envDatabaseURL); v != "" {
				r.URL = v
			}
		}
		if r.Schema == "" {
			return flagErrorf("pg-schema", "must not be empty (default %q)", defaultPGSchema)
		}
		cmd.SetContext(withDBConfig(cmd.Context(), r))
		return nil
	}
}

// parseDBURL parses a --db value. It accepts sqlite:PATH, sqlite://PATH,
// a plain path ending in .db, .sqlite or .sqlite3, and postgres:// or
// postgresql:// URLs. Errors are usage errors naming --db; they never show a
// password.
func parseDBURL(s string) (storeurl.Target, error) {
	t, err := storeurl.Parse(s)
	if err != nil {
		return t, flagErrorf("db", "%s", strings.TrimPrefix(err.Error(), "storeurl: "))
	}
	return t, nil
}

// redactURL returns s with any password replaced by "xxxxx".
func redactURL(s string) string { return storeurl.Redact(s) }

// secretsOf returns the passwords in a database URL, to scrub from messages.
func secretsOf(s string) []string { return storeurl.Secrets(s) }

// scrub replaces every secret in msg with "xxxxx".
func scrub(msg string, secrets ...string) string {
	for _, s := range secrets {
		if len(s) >= 3 {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
			if e := url.QueryEscape(s); e != s {
				msg = strings.ReplaceAll(msg, e, "xxxxx")
			}
		}
	}
	return msg
}

// openOptions tune how a command opens its store.
type openOptions struct {
	// Schema is the PostgreSQL schema. Default "redrive".
	Schema string
	// Migrate applies pending PostgreSQL migrations. SQLite always
	// migrates when it opens.
	Migrate bool
	// AllowUnmigrated skips the check that the PostgreSQL schema is up to
	// date (migrate status needs that).
	AllowUnmigrated bool
	// MustExist refuses a SQLite file that does not exist yet, rather than
	// creating an empty database (for the read and DLQ commands).
	MustExist bool
	// VacuumAfter is postgres.Options.VacuumAfter. Default 0: the store's
	// default.
	VacuumAfter int
}

// openStore opens the store named by url: "sqlite:PATH" (also
// "sqlite://PATH" and a plain *.db path) or "postgres://..." /
// "postgresql://...". The PostgreSQL schema comes from --pg-schema through
// ctx (default "redrive"); a PostgreSQL schema that lacks migrations is an
// error that says to run `redrive migrate up`. It returns the store and the
// function that closes it. Errors never contain the password.
func openStore(ctx context.Context, url string) (redrive.Store, func() error, error) {
	return openStoreWith(ctx, url, openOptions{Schema: dbConfigFrom(ctx).Schema})
}

// openStoreWith is openStore with options.
func openStoreWith(ctx context.Context, dbURL string, o openOptions) (redrive.Store, func() error, error) {
	t, err := parseDBURL(dbURL)
	if err != nil {
		return nil, nil, err
	}
	if o.Schema == "" {
		o.Schema = defaultPGSchema
	}
	switch t.Kind {
	case storeurl.SQLite:
		if o.MustExist {
			if _, err := os.Stat(t.Path); errors.Is(err, fs.ErrNotExist) {
				return nil, nil, fmt.Errorf("database file %s does not exist: check --db or %s, or run `redrive migrate up` to create it", t.Path, envDatabaseURL)
			}
		}
		s, err := sqlite.Open(ctx, t.Path)
		if err != nil {
			return nil, nil, fmt.Errorf("open %s: %w", t.Path, err)
		}
		return s, s.Close, nil
	case storeurl.Postgres:
		secrets := secretsOf(t.URL)
		s, err := postgres.Open(ctx, t.URL, postgres.Options{Schema: o.Schema, VacuumAfter: o.VacuumAfter})
		if err != nil {
			return nil, nil, fmt.Errorf("connect to %s: %s", redactURL(t.URL), scrub(err.Error(), secrets...))
		}
		if o.Migrate {
			if err := s.Migrate(ctx); err != nil {
				s.Close()
				return nil, nil, fmt.Errorf("migrate schema %q: %s", o.Schema, scrub(err.Error(), secrets...))
			}
		}
		if !o.AllowUnmigrated {
			ms, err := s.MigrationStatus(ctx)
			if err != nil {
				s.Close()
				return nil, nil, fmt.Errorf("check schema %q: %s", o.Schema, scrub(err.Error(), secrets...))
			}
			pending := 0
			for _, m := range ms {
				if !m.Applied {
					pending++
				}
			}
			if pending > 0 {
				s.Close()
				return nil, nil, fmt.Errorf("schema %q of %s lacks %d of %d migrations: %s (with the same --db and --pg-schema)", o.Schema, redactURL(t.URL), pending, len(ms), migrateFirstHint)
			}
		}
		return s, s.Close, nil
	}
	return nil, nil, flagErrorf("db", "unsupported database URL")
}

// storeFor opens the store chosen on cmd's command line for a read or DLQ
// command: a SQLite file must exist and a PostgreSQL schema must be
// migrated.
func storeFor(cmd *cobra.Command) (redrive.Store, func() error, error) {
	c := dbConfigFrom(cmd.Context())
	return openStoreWith(cmd.Context(), c.URL, openOptions{Schema: c.Schema, MustExist: true})
}

// migrationRow is one migration's status, whichever the store.
type migrationRow = redrive.Migration

// migrationStatus lists the migrations of a SQLite or PostgreSQL store.
func migrationStatus(ctx context.Context, s redrive.Store) ([]migrationRow, error) {
	m, ok := s.(redrive.Migrator)
	if !ok {
		return nil, fmt.Errorf("migration status: store %T has no migrations", s)
	}
	ms, err := m.MigrationStatus(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	return ms, nil
}
