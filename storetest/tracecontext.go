package storetest

import (
	"fmt"
	"time"

	"github.com/redrive/redrive"
)

// testTraceContext checks that the W3C Trace Context an item is enqueued
// with (NewItem.TraceParent and TraceState) is kept with the item and
// returned by every read of it: claims, the rescuer's claims, GetItem and
// ListItems, at later stages and after a redrive; both for a small keyed
// batch and for a batch large enough that a store may insert it another
// way (the PostgreSQL store's COPY from 1,000 items without keys).
func testTraceContext(h *h) {
	const (
		tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		ts = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
	)
	r := h.run("p", "")
	in := h.enqueue(r, "a", Base,
		redrive.NewItem{Key: "both", Payload: []byte("1"), TraceParent: tp, TraceState: ts},
		redrive.NewItem{Key: "parent", Payload: []byte("2"), TraceParent: tp},
		redrive.NewItem{Key: "none", Payload: []byte("3")})
	want := map[int64][2]string{in[0]: {tp, ts}, in[1]: {tp, ""}, in[2]: {"", ""}}
	check := func(what string, it redrive.Item) {
		h.Helper()
		w, ok := want[it.ID]
		if !ok {
			return
		}
		if it.TraceParent != w[0] || it.TraceState != w[1] {
			h.Errorf("%s: item %d trace context = %q, %q; want %q, %q", what, it.ID, it.TraceParent, it.TraceState, w[0], w[1])
		}
	}
	for _, id := range in {
		check("GetItem", h.item(id))
	}
	for _, it := range h.list(redrive.ItemFilter{RunID: r.ID}) {
		check("ListItems", it)
	}
	ls := h.claimAll("p", Base)
	if len(ls) != 3 {
		h.Fatalf("claimed %d, want 3", len(ls))
	}
	for _, l := range ls {
		check("Claim", l.Item)
	}
	// The next stage's claim, the rescuer's, and a redriven item's keep it.
	t1 := at(time.Second)
	for _, l := range ls {
		h.complete(advance(l, t1, "b", []byte("out")))
	}
	ls = h.claimAll("p", t1)
	for _, l := range ls {
		if l.Item.Stage != "b" {
			h.Errorf("item %d at stage %q, want b", l.Item.ID, l.Item.Stage)
		}
		check("Claim at stage b", l.Item)
	}
	ex, err := h.s.ClaimExpired(h.ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 10,
		Now: at(5 * time.Minute), LeaseUntil: at(6 * time.Minute)})
	if err != nil || len(ex) != 3 {
		h.Fatalf("ClaimExpired = %v, %v; want 3", ids(ex), err)
	}
	for _, l := range ex {
		check("ClaimExpired", l.Item)
		h.complete(kill(l, at(5*time.Minute), "final", "no"))
	}
	if n, err := h.s.Redrive(h.ctx, redrive.ItemFilter{RunID: r.ID}, at(6*time.Minute), 0); err != nil || n != 3 {
		h.Fatalf("Redrive = %d, %v; want 3", n, err)
	}
	for _, l := range h.claimAll("p", at(6*time.Minute)) {
		check("Claim after redrive", l.Item)
	}

	// A large batch without keys.
	big := make([]redrive.NewItem, 1000)
	for i := range big {
		big[i].Payload = fmt.Appendf(nil, "%d", i)
		if i%2 == 0 {
			big[i].TraceParent, big[i].TraceState = tp, ts
		}
	}
	r2 := h.run("q", "")
	bigIDs := h.enqueue(r2, "a", Base, big...)
	for i, id := range bigIDs {
		if i%2 == 0 {
			want[id] = [2]string{tp, ts}
		} else {
			want[id] = [2]string{"", ""}
		}
	}
	got := h.claimAll("q", Base)
	if len(got) != len(big) {
		h.Fatalf("claimed %d of the large batch, want %d", len(got), len(big))
	}
	for _, l := range got {
		check("Claim of the large batch", l.Item)
	}
}
