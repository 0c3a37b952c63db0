package storeurl_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redrive/redrive/sqlite"
	"github.com/redrive/redrive/storeurl"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want storeurl.Target
	}{
		{"sqlite:redrive.db", storeurl.Target{Kind: storeurl.SQLite, Path: "redrive.db"}},
		{"sqlite:///var/lib/r.db", storeurl.Target{Kind: storeurl.SQLite, Path: "/var/lib/r.db"}},
		{"sqlite://r.db", storeurl.Target{Kind: storeurl.SQLite, Path: "r.db"}},
		{"data/x.sqlite3", storeurl.Target{Kind: storeurl.SQLite, Path: "data/x.sqlite3"}},
		{"postgres://u:p@h/db", storeurl.Target{Kind: storeurl.Postgres, URL: "postgres://u:p@h/db"}},
		{"postgresql://h/db", storeurl.Target{Kind: storeurl.Postgres, URL: "postgresql://h/db"}},
	} {
		got, err := storeurl.Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "sqlite:", "mysql://u:secret@h/db", "redrive"} {
		_, err := storeurl.Parse(bad)
		if !errors.Is(err, storeurl.ErrUnsupported) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Parse(%q) = %v; want ErrUnsupported without the password", bad, err)
		}
	}
}

func TestRedactAndSecrets(t *testing.T) {
	u := "postgres://app:hunter22@db:5432/app?password=other&sslmode=disable"
	r := storeurl.Redact(u)
	if strings.Contains(r, "hunter22") || strings.Contains(r, "other") || !strings.Contains(r, "db:5432") {
		t.Fatalf("Redact = %s", r)
	}
	if s := storeurl.Secrets(u); len(s) != 2 || s[0] != "hunter22" || s[1] != "other" {
		t.Fatalf("Secrets = %v", s)
	}
}

func TestOpenSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	s, err := storeurl.Open(context.Background(), "sqlite:"+path, storeurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st, ok := s.(*sqlite.Store); !ok || st.Path() != path {
		t.Fatalf("opened %T", s)
	}
}
