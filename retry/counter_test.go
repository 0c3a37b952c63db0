package retry

import (
	"sync"
	"testing"
	"time"
)

func TestCounterConcurrentAdds(t *testing.T) {
	c := newCounter()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10_000 {
				c.add(1)
			}
		})
	}
	wg.Wait()
	if n := c.load(); n != 80_000 {
		t.Fatalf("load = %d, want 80000", n)
	}
}

func TestHistoryGrowth(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	h := newHistory(10*time.Second, t0, 0, 0)

	// Counts since the anchor are exact while the window reaches back past it.
	if a, b := h.growth(at(3), 30, 3); a != 30 || b != 3 {
		t.Fatalf("since anchor: %v %v, want 30 3", a, b)
	}
	// Steady traffic, observed once a second: exact.
	for s := 1; s <= 30; s++ {
		h.observe(at(float64(s)), int64(10*s), int64(s))
	}
	if a, b := h.growth(at(30), 300, 30); a != 100 || b != 10 {
		t.Fatalf("steady: %v %v, want 100 10", a, b)
	}
	if len(h.pts) > historyBuckets+2 {
		t.Fatalf("history keeps %d points", len(h.pts))
	}
	// A quiet spell: events between two observations are spread evenly.
	// 100 requests between t=30 and t=50, none seen in between: the window
	// (40, 50] gets half of them.
	if a, _ := h.growth(at(50), 400, 30); a != 50 {
		t.Fatalf("interpolated: %v, want 50", a)
	}
	// After the window nothing is left.
	h.observe(at(50), 400, 30)
	if a, b := h.growth(at(60), 400, 30); a != 0 || b != 0 {
		t.Fatalf("after the window: %v %v", a, b)
	}
	// Reset measures from a new anchor.
	h.reset(at(60), 400, 30)
	if a, b := h.growth(at(61), 405, 31); a != 5 || b != 1 {
		t.Fatalf("after reset: %v %v", a, b)
	}
	// A clock that steps back does not break the order.
	h.observe(at(59), 410, 31)
	if a, _ := h.growth(at(62), 420, 31); a != 20 {
		t.Fatalf("clock step back: %v, want 20", a)
	}
}
