package storetest

import (
	"slices"
	"time"

	"github.com/redrive/redrive"
)

// testStartMarks checks that a lease says whether its attempt started:
// MarkStarted records the start for the current lease only, a claim clears
// it, the rescuer sees it in ClaimExpired, and ReleaseUnstarted returns an
// item without an attempt, counting the loss.
func testStartMarks(h *h) {
	r := h.run("p", "")
	in := h.enqueueN(r, "a", Base, 3)
	ls := h.claim(redrive.ClaimRequest{Owner: "w1", Pipelines: []string{"p"}, Limit: 3, Now: Base, LeaseUntil: at(time.Minute)})
	if len(ls) != 3 {
		h.Fatalf("claimed %d, want 3", len(ls))
	}
	for _, l := range ls {
		if !l.Item.AttemptStartedAt.IsZero() || l.Item.LeaseLosses != 0 {
			h.Errorf("fresh lease of item %d: started %v, losses %d; want neither", l.Item.ID, l.Item.AttemptStartedAt, l.Item.LeaseLosses)
		}
	}
	started := at(2 * time.Second)
	lost, err := h.s.MarkStarted(h.ctx, []redrive.StartMark{{Lease: ls[0].Ref(), At: started}})
	if err != nil || len(lost) != 0 {
		h.Fatalf("MarkStarted = %v, %v", lost, err)
	}
	h.equalTime("AttemptStartedAt", h.item(in[0]).AttemptStartedAt, started)
	if !h.item(in[1]).AttemptStartedAt.IsZero() {
		h.Errorf("unmarked lease has a start")
	}
	// A mark changes no lease and no count.
	h.equalTime("LeaseExpiresAt after mark", h.item(in[0]).LeaseExpiresAt, at(time.Minute))
	if c := h.getRun(r.ID).Counts; c.Running != 3 || c.Total != 3 {
		h.Errorf("counts after mark = %+v", c)
	}

	// The rescuer sees which leases started.
	ex, err := h.s.ClaimExpired(h.ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 10,
		Now: at(2 * time.Minute), LeaseUntil: at(3 * time.Minute)})
	if err != nil || len(ex) != 3 {
		h.Fatalf("ClaimExpired = %v, %v; want 3", ids(ex), err)
	}
	byID := map[int64]redrive.Lease{}
	for _, l := range ex {
		byID[l.Item.ID] = l
	}
	h.equalTime("rescued AttemptStartedAt", byID[in[0]].Item.AttemptStartedAt, started)
	if !byID[in[1]].Item.AttemptStartedAt.IsZero() || !byID[in[2]].Item.AttemptStartedAt.IsZero() {
		h.Errorf("rescued unstarted leases carry a start: %v, %v", byID[in[1]].Item.AttemptStartedAt, byID[in[2]].Item.AttemptStartedAt)
	}
	// A stale lease's mark and release change nothing.
	lost, err = h.s.MarkStarted(h.ctx, []redrive.StartMark{{Lease: ls[1].Ref(), At: at(3 * time.Second)}})
	if err != nil || !slices.Equal(lost, []int64{in[1]}) {
		h.Errorf("stale MarkStarted lost = %v, %v; want [%d]", lost, err, in[1])
	}
	if err := h.s.ReleaseUnstarted(h.ctx, []redrive.LeaseRef{ls[1].Ref()}, at(2*time.Minute)); err != nil {
		h.Fatal(err)
	}
	if it := h.item(in[1]); it.State != redrive.StateRunning || it.LeaseLosses != 0 || !it.AttemptStartedAt.IsZero() {
		h.Errorf("item after stale calls = state %s, losses %d, started %v", it.State, it.LeaseLosses, it.AttemptStartedAt)
	}

	// The rescuer returns the unstarted ones without an attempt.
	if err := h.s.ReleaseUnstarted(h.ctx, []redrive.LeaseRef{byID[in[1]].Ref(), byID[in[2]].Ref()}, at(2*time.Minute)); err != nil {
		h.Fatal(err)
	}
	for _, id := range in[1:] {
		it := h.item(id)
		if it.State != redrive.StatePending || it.LeaseLosses != 1 || it.Attempt != 0 || it.LeaseOwner != "" {
			h.Errorf("released unstarted item %d = state %s, losses %d, attempt %d, owner %q", id, it.State, it.LeaseLosses, it.Attempt, it.LeaseOwner)
		}
		h.equalTime("released NextAt", it.NextAt, at(2*time.Minute))
		if as := h.attempts(id); len(as) != 0 {
			h.Errorf("ReleaseUnstarted recorded %d attempts", len(as))
		}
	}
	if c := h.getRun(r.ID).Counts; c.Pending != 2 || c.Running != 1 || c.Total != 3 {
		h.Errorf("counts after release = %+v", c)
	}
	// A graceful release counts no loss, and a new claim clears the start.
	again := h.claim(redrive.ClaimRequest{Owner: "w2", Pipelines: []string{"p"}, Limit: 3, Now: at(3 * time.Minute), LeaseUntil: at(4 * time.Minute)})
	if len(again) != 2 {
		h.Fatalf("reclaimed %d, want 2", len(again))
	}
	if _, err := h.s.MarkStarted(h.ctx, []redrive.StartMark{{Lease: again[0].Ref(), At: at(3 * time.Minute)}}); err != nil {
		h.Fatal(err)
	}
	if err := h.s.Release(h.ctx, []redrive.LeaseRef{again[0].Ref(), again[1].Ref()}, at(3*time.Minute)); err != nil {
		h.Fatal(err)
	}
	third := h.claim(redrive.ClaimRequest{Owner: "w3", Pipelines: []string{"p"}, Limit: 3, Now: at(4 * time.Minute), LeaseUntil: at(5 * time.Minute)})
	for _, l := range third {
		if l.Item.LeaseLosses != 1 || !l.Item.AttemptStartedAt.IsZero() {
			h.Errorf("after a graceful release, item %d: losses %d, started %v; want 1 and none", l.Item.ID, l.Item.LeaseLosses, l.Item.AttemptStartedAt)
		}
	}
	if len(third) != 2 {
		h.Errorf("claimed %d after release, want 2", len(third))
	}
	if lost, err := h.s.MarkStarted(h.ctx, nil); err != nil || len(lost) != 0 {
		h.Errorf("MarkStarted(nil) = %v, %v", lost, err)
	}
}
