// Package storeurl opens the redrive store that a database URL names, the
// way every redrive command takes it: "sqlite:PATH" (also "sqlite://PATH"
// and a bare path ending in .db, .sqlite or .sqlite3) for the embedded
// SQLite store, "postgres://..." or "postgresql://..." for PostgreSQL.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/postgres"
	"github.com/redrive/redrive/sqlite"
)

// Kind is the kind of database a URL names.
type Kind int

// The kinds of database.
const (
	SQLite Kind = iota + 1
	Postgres
)

// Target is a parsed database URL.
type Target struct {
	Kind Kind
	// Path is the SQLite file.
	Path string
	// URL is the PostgreSQL connection URL.
	URL string
}

// ErrUnsupported is wrapped by the errors of Parse.
var ErrUnsupported = errors.New("storeurl: unsupported database URL")

// Parse parses a database URL. Its errors never show a password.
func Parse(s string) (Target, error) {
	switch {
	case s == "":
		return Target{}, fmt.Errorf("%w: empty; use sqlite:PATH or a postgres:// URL", ErrUnsupported)
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		if _, err := url.Parse(s); err != nil {
			return Target{}, fmt.Errorf("%w: cannot parse PostgreSQL URL %s", ErrUnsupported, Redact(s))
		}
		return Target{Kind: Postgres, URL: s}, nil
	case strings.HasPrefix(s, "sqlite://"), strings.HasPrefix(s, "sqlite:"):
		p := strings.TrimPrefix(strings.TrimPrefix(s, "sqlite:"), "//")
		if p == "" {
			return Target{}, fmt.Errorf("%w: %s needs a file path, e.g. sqlite:redrive.db", ErrUnsupported, s)
		}
		return Target{Kind: SQLite, Path: p}, nil
	case !strings.Contains(s, "://") && (strings.HasSuffix(s, ".db") || strings.HasSuffix(s, ".sqlite") || strings.HasSuffix(s, ".sqlite3")):
		return Target{Kind: SQLite, Path: s}, nil
	}
	return Target{}, fmt.Errorf("%w %q: use sqlite:PATH, a *.db file, or a postgres:// URL", ErrUnsupported, Redact(s))
}

// Redact returns s with any password replaced by "xxxxx", both in the
// user information and in a password query parameter.
func Redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		// Not a URL that can be taken apart: hide whatever precedes an @.
		if i := strings.Index(s, "@"); i >= 0 {
			return "xxxxx" + s[i:]
		}
		return s
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// Secrets returns the passwords a database URL contains, so that they can
// be scrubbed from messages that might quote them.
func Secrets(s string) []string {
	u, err := url.Parse(s)
	if err != nil {
		return nil
	}
	var out []string
	if p, ok := u.User.Password(); ok && p != "" {
		out = append(out, p)
	}
	if p := u.Query().Get("password"); p != "" {
		out = append(out, p)
	}
	return out
}

// Options tune Open.
type Options struct {
	// Schema is the PostgreSQL schema. Default "redrive".
	Schema string
	// Migrate applies pending PostgreSQL migrations. SQLite always
	// migrates when it opens. Default false.
	Migrate bool
}

// Open opens the store that s names.
func Open(ctx context.Context, s string, o Options) (redrive.Store, error) {
	t, err := Parse(s)
	if err != nil {
		return nil, err
	}
	return t.Open(ctx, o)
}

// Open opens the store that t names.
func (t Target) Open(ctx context.Context, o Options) (redrive.Store, error) {
	switch t.Kind {
	case SQLite:
		return sqlite.Open(ctx, t.Path)
	case Postgres:
		return postgres.Open(ctx, t.URL, postgres.Options{Schema: o.Schema, Migrate: o.Migrate})
	}
	return nil, ErrUnsupported
}
