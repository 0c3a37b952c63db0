package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/redrive/redrive/storetest"
)

// BenchmarkOldestDue: see storetest.BenchmarkOldestDue.
func BenchmarkOldestDue(b *testing.B) {
	for _, shape := range []string{"fresh", "retries"} {
		b.Run(shape, func(b *testing.B) {
			storetest.BenchmarkOldestDue(b, openTest(b, filepath.Join(b.TempDir(), "bench.db")), shape, 100_000)
		})
	}
}
