package storeurl_test

import (
	"errors"
	"fmt"

	"github.com/redrive/redrive/storeurl"
)

// The database URL forms every redrive command accepts. An unsupported URL
// is refused with an error that never shows its password.
func ExampleParse() {
	for _, s := range []string{
		"sqlite:redrive.db",
		"sqlite:///var/lib/redrive/work.db",
		"data/work.sqlite3",
		"postgres://app@db:5432/app?sslmode=disable",
	} {
		t, err := storeurl.Parse(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		switch t.Kind {
		case storeurl.SQLite:
			fmt.Println("sqlite file:", t.Path)
		case storeurl.Postgres:
			fmt.Println("postgres:   ", t.URL)
		}
	}

	_, err := storeurl.Parse("mysql://app:secret@db/app")
	fmt.Println(errors.Is(err, storeurl.ErrUnsupported))
	fmt.Println(err)
	// Output:
	// sqlite file: redrive.db
	// sqlite file: /var/lib/redrive/work.db
	// sqlite file: data/work.sqlite3
	// postgres:    postgres://app@db:5432/app?sslmode=disable
	// true
	// storeurl: unsupported database URL "mysql://app:xxxxx@db/app": use sqlite:PATH, a *.db file, or a postgres:// URL
}

// Redact hides passwords before a URL is logged or printed.
func ExampleRedact() {
	fmt.Println(storeurl.Redact("postgres://app:hunter22@db:5432/app?sslmode=disable"))
	fmt.Println(storeurl.Redact("postgres://app@db/app?password=hunter22"))
	fmt.Println(storeurl.Redact("sqlite:redrive.db"))
	// Output:
	// postgres://app:xxxxx@db:5432/app?sslmode=disable
	// postgres://app@db/app?password=xxxxx
	// sqlite:redrive.db
}
