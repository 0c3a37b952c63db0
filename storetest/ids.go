package storetest

import (
	"slices"

	"github.com/redrive/redrive"
)

// testFilterIDs checks ItemFilter.IDs: it selects exactly the named items
// for listing, counting and canceling, combined with the other fields, so
// that canceling one item through the API never touches another.
func testFilterIDs(h *h) {
	r := h.run("p", "")
	ids := h.enqueueN(r, "a", Base, 5)
	pick := []int64{ids[1], ids[3]}
	var got []int64
	for _, it := range h.list(redrive.ItemFilter{IDs: pick}) {
		got = append(got, it.ID)
	}
	if !slices.Equal(got, pick) {
		h.Errorf("ListItems(IDs %v) = %v", pick, got)
	}
	if n := h.count(redrive.ItemFilter{IDs: pick, States: []redrive.State{redrive.StateDead}}); n != 0 {
		h.Errorf("Count(IDs, dead) = %d, want 0", n)
	}
	// An ID that is not pending cancels nothing, and no neighbour.
	l := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 1, Now: Base})
	if len(l) != 1 || l[0].Item.ID != ids[0] {
		h.Fatalf("claimed %v, want item %d", l, ids[0])
	}
	reason := redrive.Reason{Class: redrive.ClassCanceled, Error: "canceled by a test", At: at(1)}
	n, err := h.s.CancelPending(h.ctx, redrive.ItemFilter{IDs: []int64{ids[0]}}, reason)
	if err != nil || n != 0 {
		h.Fatalf("CancelPending(running item) = %d, %v; want 0", n, err)
	}
	n, err = h.s.CancelPending(h.ctx, redrive.ItemFilter{IDs: []int64{ids[2]}}, reason)
	if err != nil || n != 1 {
		h.Fatalf("CancelPending(IDs %d) = %d, %v; want 1", ids[2], n, err)
	}
	for i, id := range ids {
		want := redrive.StatePending
		switch i {
		case 0:
			want = redrive.StateRunning
		case 2:
			want = redrive.StateCanceled
		}
		if st := h.item(id).State; st != want {
			h.Errorf("item %d is %s, want %s", id, st, want)
		}
	}
	if err := (redrive.ItemFilter{IDs: []int64{0}}).Validate(); err == nil {
		h.Error("a filter with ID 0 validated")
	}
}
