// Package pgtest gives tests a PostgreSQL database: a schema of their own on
// the server named by REDRIVE_TEST_POSTGRES, or a throwaway cluster.
//
// When the server is unreachable, tests skip, except when the environment
// variable CI is set (to anything but "" or "false"): then they fail, so
// that PostgreSQL tests never silently skip in CI. ./scripts/test.sh starts
// a throwaway cluster when no server is reachable.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive/postgres"
)

// EnvURL names the environment variable holding the test server's URL.
const EnvURL = "REDRIVE_TEST_POSTGRES"

// DefaultURL is the test server's URL when EnvURL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// BaseURL returns the URL in EnvURL, or DefaultURL.
func BaseURL() string {
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return DefaultURL
}

// InCI reports whether the tests run in CI (CI set and not "false" or "0").
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v != "" && v != "false" && v != "0"
}

var (
	pingOnce sync.Once
	pingErr  error
)

// Ping connects to url and runs a query, within timeout.
func Ping(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var one int
	return conn.QueryRow(ctx, `SELECT 1`).Scan(&one)
}

// unavailable skips t, or fails it in CI.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s (CI is set: PostgreSQL tests must not skip; run ./scripts/test.sh)", msg)
	}
	t.Skipf("%s; set %s or run ./scripts/test.sh", msg, EnvURL)
}

// URL returns the base URL of the test server. When the server is
// unreachable it skips the test, or fails it in CI.
func URL(t testing.TB) string {
	t.Helper()
	u := BaseURL()
	pingOnce.Do(func() { pingErr = Ping(context.Background(), u, 5*time.Second) })
	if pingErr != nil {
		unavailable(t, "pgtest: PostgreSQL at %s unreachable: %v", redact(u), pingErr)
	}
	return u
}

func redact(u string) string {
	if i := strings.Index(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "…" + u[i:]
		}
	}
	return u
}

// SchemaName returns a schema name unique to this call, derived from the
// test's name.
func SchemaName(t testing.TB) string {
	var b strings.Builder
	for _, r := range strings.ToLower(t.Name()) {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	var rnd [5]byte
	rand.Read(rnd[:])
	return "t_" + strings.Trim(name, "_") + "_" + hex.EncodeToString(rnd[:])
}

// NewSchema creates a uniquely named, empty schema on the test server and
// drops it (with everything in it) when the test ends, so that tests run
// in parallel without seeing each other's rows.
func NewSchema(t testing.TB) (url, schema string) {
	t.Helper()
	url = URL(t)
	return url, CreateSchema(t, url)
}

// CreateSchema is NewSchema on the server at url.
func CreateSchema(t testing.TB, url string) string {
	t.Helper()
	schema := SchemaName(t)
	q := pgx.Identifier{schema}.Sanitize()
	ctx := context.Background()
	if err := execSQL(ctx, url, `CREATE SCHEMA `+q); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		if err := execSQL(ctx, url, `DROP SCHEMA IF EXISTS `+q+` CASCADE`); err != nil {
			t.Logf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	return schema
}

func execSQL(ctx context.Context, url, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// OpenStore opens a migrated Store in a new schema of the test server and
// closes it when the test ends.
func OpenStore(t testing.TB) *postgres.Store {
	t.Helper()
	url, schema := NewSchema(t)
	return OpenStoreAt(t, url, schema)
}

// OpenStoreAt opens a migrated Store on url in schema and closes it when
// the test ends.
func OpenStoreAt(t testing.TB, url, schema string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema, Migrate: true})
	if err != nil {
		t.Fatalf("pgtest: open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
