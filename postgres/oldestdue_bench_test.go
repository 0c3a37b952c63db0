package postgres_test

import (
	"testing"

	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/storetest"
)

// BenchmarkOldestDue: see storetest.BenchmarkOldestDue.
func BenchmarkOldestDue(b *testing.B) {
	for _, shape := range []string{"fresh", "retries"} {
		b.Run(shape, func(b *testing.B) { storetest.BenchmarkOldestDue(b, pgtest.OpenStore(b), shape, 100_000) })
	}
}
