package redrive_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// markCounter counts the store's MarkStarted calls.
type markCounter struct {
	redrive.Store
	marks atomic.Int64
}

func (s *markCounter) MarkStarted(ctx context.Context, marks []redrive.StartMark) ([]int64, error) {
	s.marks.Add(1)
	return s.Store.MarkStarted(ctx, marks)
}

// TestExternalLeaseStartsInClaim checks that the items an external worker
// leases are recorded as started when the answer comes, so that a worker
// that dies is charged: by the claim itself for a stage that is not paced
// (no MarkStarted: one store call fewer a batch), and by MarkStarted after
// the slots of a paced one.
func TestExternalLeaseStartsInClaim(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stage redrive.Stage
		marks bool
	}{
		{"default", redrive.Stage{}, false},
		{"paced", redrive.Stage{RateLimit: redrive.RateLimit{Rate: 1000}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s redrive.Store) {
				ms := &markCounter{Store: s}
				c := startClient(t, ms, testConfig(&recorder{}), extPipeline("p", tc.stage))
				if _, err := c.StartRun(context.Background(), "p", items(2), redrive.RunOptions{}); err != nil {
					t.Fatal(err)
				}
				var ls []redrive.ExternalLease
				deadline := time.Now().Add(30 * time.Second)
				for len(ls) < 2 && time.Now().Before(deadline) {
					ls = append(ls, lease(t, c, redrive.ExternalLeaseRequest{Max: 2 - len(ls), Wait: time.Second})...)
				}
				if len(ls) != 2 {
					t.Fatalf("leased %d items, want 2", len(ls))
				}
				for _, l := range ls {
					it, err := s.GetItem(context.Background(), l.Item.ID)
					if err != nil {
						t.Fatal(err)
					}
					if it.State != redrive.StateRunning || it.AttemptStartedAt.IsZero() {
						t.Errorf("leased item %d: state %s, started %v; want running with a start", it.ID, it.State, it.AttemptStartedAt)
					}
				}
				if n := ms.marks.Load(); (n > 0) != tc.marks {
					t.Errorf("MarkStarted called %d times; want calls %v", n, tc.marks)
				}
			})
		})
	}
}
