// Command pgping exits 0 when the PostgreSQL server at the URL in
// REDRIVE_TEST_POSTGRES (or pgtest.DefaultURL, or its first argument)
// accepts a connection and a query within 3 seconds, and 1 otherwise.
// scripts/test.sh uses it to decide whether to start a throwaway cluster.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redrive/redrive/internal/pgtest"
)

func main() {
	url := pgtest.BaseURL()
	if len(os.Args) > 1 {
		url = os.Args[1]
	}
	if err := pgtest.Ping(context.Background(), url, 3*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "pgping:", err)
		os.Exit(1)
	}
}
