package storetest

import (
	"slices"
	"sync"
	"time"

	"github.com/redrive/redrive"
)

// testSharedLimits: a store keeps one pace per dependency that every process shares
// (redrive.LimitStore): reserved slots follow GCRA (a burst after a quiet spell, then
// one slot per interval), reservations under concurrency never share a slot, and a
// gate that only moves later stops reservations while it is closed.
func testSharedLimits(h *h) {
	ls, ok := h.s.(redrive.LimitStore)
	if !ok {
		h.Fatalf("%T does not implement redrive.LimitStore", h.s)
	}
	const iv = 100 * time.Millisecond
	reserve := func(name string, want, burst int, now time.Time) ([]time.Time, redrive.SlotGrant) {
		h.Helper()
		g, err := ls.ReserveSlots(h.ctx, redrive.SlotRequest{Name: name, Interval: iv, Burst: burst, Want: want, Now: now})
		if err != nil {
			h.Fatalf("ReserveSlots: %v", err)
		}
		var out []time.Time
		for i := range g.Granted {
			out = append(out, g.Slot(i, iv, now))
		}
		return out, g
	}
	want := func(got []time.Time, offsets ...time.Duration) {
		h.Helper()
		if len(got) != len(offsets) {
			h.Fatalf("slots %v, want %d", got, len(offsets))
		}
		for i, o := range offsets {
			if !got[i].Equal(at(o)) {
				h.Fatalf("slot %d at %v, want %v (all: %v)", i, got[i], at(o), got)
			}
		}
	}
	s, _ := reserve("api", 5, 3, Base)
	want(s, 0, 0, 0, iv, 2*iv)
	s, _ = reserve("api", 2, 3, Base)
	want(s, 3*iv, 4*iv)
	s, _ = reserve("other", 1, 1, Base)
	want(s, 0)
	// After a quiet spell the burst is back.
	s, _ = reserve("api", 4, 3, at(10*time.Second))
	want(s, 10*time.Second, 10*time.Second, 10*time.Second, 10*time.Second+iv)

	// The gate.
	until := at(20 * time.Second)
	if err := ls.CloseGate(h.ctx, "api", until); err != nil {
		h.Fatalf("CloseGate: %v", err)
	}
	if err := ls.CloseGate(h.ctx, "api", at(16*time.Second)); err != nil {
		h.Fatalf("CloseGate: %v", err)
	}
	s, g := reserve("api", 2, 1, at(15*time.Second))
	if len(s) != 0 || !g.GateUntil.Equal(until) {
		h.Fatalf("behind a gate closed until %v: %+v (an earlier close must not shorten it)", until, g)
	}
	if _, g := reserve("other", 1, 1, at(15*time.Second)); g.Granted != 1 || !g.GateUntil.IsZero() {
		h.Fatalf("another dependency's gate is closed: %+v", g)
	}
	s, _ = reserve("api", 1, 1, at(21*time.Second))
	want(s, 21*time.Second)
	if err := ls.CloseGate(h.ctx, "new", until); err != nil {
		h.Fatalf("CloseGate of a dependency never reserved: %v", err)
	}
	if _, g := reserve("new", 1, 1, at(15*time.Second)); !g.GateUntil.Equal(until) {
		h.Fatalf("gate of a new dependency: %+v, want closed until %v", g, until)
	}

	// Concurrent reservations at one instant get distinct, evenly spaced slots.
	now := at(time.Hour)
	var (
		mu  sync.Mutex
		all []time.Time
		wg  sync.WaitGroup
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				g, err := ls.ReserveSlots(h.ctx, redrive.SlotRequest{Name: "busy", Interval: iv, Burst: 1, Want: 1, Now: now})
				if err != nil {
					h.Errorf("ReserveSlots: %v", err)
					return
				}
				mu.Lock()
				all = append(all, g.Slot(0, iv, now))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	for i, t := range all {
		if !t.Equal(now.Add(time.Duration(i) * iv)) {
			h.Fatalf("concurrent slot %d at %v, want %v: slots shared or skipped", i, t, now.Add(time.Duration(i)*iv))
		}
	}
}
