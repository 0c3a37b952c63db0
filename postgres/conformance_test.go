package postgres_test

import (
	"testing"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/storetest"
)

// TestConformance runs the suite every Store passes, each test in a schema
// of its own.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) redrive.Store { return pgtest.OpenStore(t) })
}
