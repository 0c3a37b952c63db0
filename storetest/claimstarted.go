package storetest

import (
	"time"

	"github.com/redrive/redrive"
)

// testClaimStarted checks ClaimRequest.StartedAt: the claim records the
// start of every item it leases, as MarkStarted would, so that the rescuer
// charges their lost attempts; ClaimExpired keeps the mark it finds; an
// item released and claimed again without it carries no start.
func testClaimStarted(h *h) {
	r := h.run("p", "")
	in := h.enqueueN(r, "a", Base, 3)
	started := at(time.Second)
	ls := h.claim(redrive.ClaimRequest{Owner: "w1", Pipelines: []string{"p"}, Limit: 2, Now: Base,
		LeaseUntil: at(time.Minute), StartedAt: started})
	if len(ls) != 2 {
		h.Fatalf("claimed %d, want 2", len(ls))
	}
	for _, l := range ls {
		h.equalTime("claimed AttemptStartedAt", l.Item.AttemptStartedAt, started)
		h.equalTime("stored AttemptStartedAt", h.item(l.Item.ID).AttemptStartedAt, started)
		if l.Token%2 != 1 || l.Item.State != redrive.StateRunning {
			h.Errorf("lease of item %d: token %d, state %s", l.Item.ID, l.Token, l.Item.State)
		}
	}
	// The item left unclaimed carries no start.
	if it := h.item(in[2]); it.State != redrive.StatePending || !it.AttemptStartedAt.IsZero() {
		h.Errorf("unclaimed item = state %s, started %v", it.State, it.AttemptStartedAt)
	}
	if c := h.getRun(r.ID).Counts; c.Running != 2 || c.Pending != 1 || c.Total != 3 {
		h.Errorf("counts after claim = %+v", c)
	}

	// The rescuer sees the starts, and keeps them on its own lease.
	ex, err := h.s.ClaimExpired(h.ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 10,
		Now: at(2 * time.Minute), LeaseUntil: at(3 * time.Minute)})
	if err != nil || len(ex) != 2 {
		h.Fatalf("ClaimExpired = %v, %v; want 2", ids(ex), err)
	}
	for _, l := range ex {
		h.equalTime("rescued AttemptStartedAt", l.Item.AttemptStartedAt, started)
	}

	// Released and claimed again without StartedAt: the mark is cleared.
	refs := []redrive.LeaseRef{ex[0].Ref(), ex[1].Ref()}
	if err := h.s.Release(h.ctx, refs, at(3*time.Minute)); err != nil {
		h.Fatal(err)
	}
	again := h.claim(redrive.ClaimRequest{Owner: "w2", Pipelines: []string{"p"}, Limit: 3, Now: at(4 * time.Minute), LeaseUntil: at(5 * time.Minute)})
	if len(again) != 3 {
		h.Fatalf("reclaimed %d, want 3", len(again))
	}
	for _, l := range again {
		if !l.Item.AttemptStartedAt.IsZero() {
			h.Errorf("claim without StartedAt: item %d started %v; want none", l.Item.ID, l.Item.AttemptStartedAt)
		}
	}
}
