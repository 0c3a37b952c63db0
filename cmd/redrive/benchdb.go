package main

import (
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// benchDatabase returns the database `redrive bench` writes its items into:
// the --db given on its command line, else a new SQLite file in a temporary
// directory that cleanup removes. REDRIVE_DATABASE_URL is not used: it names
// the user's database, and benchmark data must never land there.
func benchDatabase(cmd *cobra.Command) (url string, cleanup func(), err error) {
	if cmd.Flags().Changed("db") {
		return dbConfigFrom(cmd.Context()).URL, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "redrive-bench-")
	if err != nil {
		return "", nil, err
	}
	return "sqlite:" + filepath.Join(dir, "bench.db"), func() { os.RemoveAll(dir) }, nil
}
