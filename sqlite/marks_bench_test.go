package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/redrive/redrive/storetest"
)

// BenchmarkMarks: the audit marks of a cancel and a redrive of 100,000
// items next to the actions themselves.
func BenchmarkMarks(b *testing.B) {
	storetest.BenchmarkMarks(b, openTest(b, filepath.Join(b.TempDir(), "bench.db")), 100_000)
}
