package retry

import (
	"context"
	"sync/atomic"
	"time"
)

// Gate pauses all the calls to one dependency until a time, such as the end of a
// Retry-After: a gate for everybody rather than a wake-up per caller. The zero value is
// an open Gate. A Gate is safe for concurrent use and takes no lock.
type Gate struct {
	until atomic.Int64 // Unix ns; 0 when never closed
}

// Close closes the gate until t, or leaves it closed until a later time it already
// had, and reports whether t moved the gate's reopening.
func (g *Gate) Close(t time.Time) bool {
	at := t.UnixNano()
	for {
		cur := g.until.Load()
		if cur >= at {
			return false
		}
		if g.until.CompareAndSwap(cur, at) {
			return true
		}
	}
}

// Open opens the gate now.
func (g *Gate) Open() { g.until.Store(0) }

// ClosedUntil returns when the gate opens if it is closed at now, else the zero time.
func (g *Gate) ClosedUntil(now time.Time) time.Time {
	u := g.until.Load()
	if u == 0 || u <= now.UnixNano() {
		return time.Time{}
	}
	return time.Unix(0, u)
}

// Wait blocks until the gate is open or ctx is done; it returns ctx's error in the
// latter case. A gate closed further while Wait waits keeps it waiting.
func (g *Gate) Wait(ctx context.Context) error {
	for {
		u := g.ClosedUntil(time.Now())
		if u.IsZero() {
			return nil
		}
		t := time.NewTimer(time.Until(u))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
