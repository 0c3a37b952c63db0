package sqlite_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/redrive/redrive/sqlite"
)

// TestOpenConcurrently opens one new file from many stores at once, as a
// run and an operator's command starting together do: every open succeeds,
// whichever of them creates and migrates the file.
func TestOpenConcurrently(t *testing.T) {
	t.Parallel()
	for round := range 20 {
		path := filepath.Join(t.TempDir(), "race.db")
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := sqlite.Open(context.Background(), path)
				if err != nil {
					errs <- err
					return
				}
				errs <- st.Close()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
