package storetest

import (
	"time"

	"github.com/redrive/redrive"
)

// limited completes a lease as a rate-limited wait of d, at no cost to its attempts.
func limited(l redrive.Lease, now time.Time, d time.Duration) redrive.Completion {
	c := retry(l, now, now.Add(d), "429 too many requests")
	c.Attempt = l.Item.Attempt
	c.Record.Outcome, c.Record.Class = redrive.OutcomeRateLimited, "rate_limited"
	return c
}

// testRateLimitedWaits: a store lists the waits after a run's rate-limited attempts
// (redrive.LimitReporter), in finish order, and nothing else: not other runs', not
// other outcomes.
func testRateLimitedWaits(h *h) {
	lr, ok := h.s.(redrive.LimitReporter)
	if !ok {
		h.Fatalf("%T does not implement redrive.LimitReporter", h.s)
	}
	r := h.run("p", "")
	other := h.run("q", "")
	h.enqueueN(r, "a", Base, 2)
	h.enqueueN(other, "x", Base, 1)
	ls := h.claimAll("p", Base)
	h.complete(limited(ls[0], at(2*time.Second), 3*time.Second), retry(ls[1], at(time.Second), at(2*time.Second), "503"))
	ls = h.claimAll("p", at(10*time.Second))
	for _, l := range ls {
		h.complete(limited(l, at(11*time.Second), time.Second))
	}
	h.complete(limited(h.claimAll("q", Base)[0], Base, time.Hour))
	got, err := lr.RateLimitedWaits(h.ctx, r.ID)
	if err != nil {
		h.Fatalf("RateLimitedWaits: %v", err)
	}
	if len(got) != 3 {
		h.Fatalf("waits %+v, want 3", got)
	}
	h.equalTime("first wait", got[0].From, at(2*time.Second))
	if got[0].Delay != 3*time.Second || got[0].Stage != "a" {
		h.Fatalf("first wait %+v", got[0])
	}
	for _, w := range got[1:] {
		h.equalTime("later wait", w.From, at(11*time.Second))
		if w.Delay != time.Second {
			h.Fatalf("later wait %+v", w)
		}
	}
}
