package postgres_test

import (
	"testing"

	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/storetest"
)

// BenchmarkMarks: the audit marks of a cancel and a redrive of 100,000
// items next to the actions themselves.
func BenchmarkMarks(b *testing.B) {
	storetest.BenchmarkMarks(b, pgtest.OpenStore(b), 100_000)
}
