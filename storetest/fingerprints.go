package storetest

import (
	"fmt"
	"slices"
	"time"

	"github.com/redrive/redrive"
)

// testStoredFingerprints: the fingerprint a store keeps with each failure
// is redrive.Fingerprint of its message, whichever way the failure was
// written (a death, a failed attempt, an invalid input, a cancel), so that
// the store's grouping (FailureGroups) counts what grouping the exact
// messages in Go counts; the fingerprint filter selects exactly the items
// of one group; examples quote the group's newest deaths; a redriven item
// leaves its group.
func testStoredFingerprints(h *h) {
	r := h.run("fp", "")
	h.enqueueN(r, "s", Base, 24)
	h.enqueue(r, "s", Base, redrive.NewItem{Invalid: "line 7: unexpected token '}' at column 12"},
		redrive.NewItem{Invalid: "line 9: unexpected token ']' at column 3"})
	messages := []string{
		"item %d: malformed model output at byte %d",
		`GET http://10.0.0.%d:8080/v1/x?page=%d: connection refused`,
		"order %d of customer %d: status 503 from billing",
		"order %d of customer %d: status 429 from billing",
	}
	// Every item fails once with a message of its own; 20 then die with
	// another, the last 4 are canceled.
	for i, l := range h.claimAll("fp", Base) {
		h.complete(retry(l, at(time.Second), at(time.Second), fmt.Sprintf(messages[i%len(messages)], l.Item.ID, 3*i)))
	}
	var rest []redrive.LeaseRef
	for i, l := range h.claimAll("fp", at(time.Minute)) {
		if i >= 20 {
			rest = append(rest, l.Ref())
			continue
		}
		class := "final"
		if i%3 == 0 {
			class = "retryable"
		}
		h.complete(kill(l, at(time.Minute+time.Duration(i)*time.Second), class,
			fmt.Sprintf(messages[(i+1)%len(messages)], l.Item.ID, 7*i)))
	}
	if err := h.s.Release(h.ctx, rest, at(2*time.Minute)); err != nil {
		h.Fatal(err)
	}
	if _, err := h.s.CancelPending(h.ctx, redrive.ItemFilter{RunID: r.ID},
		redrive.Reason{Class: redrive.ClassCanceled, Error: `operator "ops" canceled run 17`, At: at(3 * time.Minute)}); err != nil {
		h.Fatal(err)
	}

	type cause struct {
		p, s, c, fp    string
		dead, failures int
	}
	causes := func(gs []redrive.ErrorGroup) []cause {
		out := make([]cause, len(gs))
		for i, g := range gs {
			out[i] = cause{g.Pipeline, g.Stage, g.Class, g.Fingerprint, g.Dead, g.Failures}
		}
		return out
	}
	dead := []redrive.State{redrive.StateDead}
	both := []redrive.State{redrive.StateDead, redrive.StateCanceled}
	for _, f := range []redrive.ItemFilter{
		{}, {RunID: r.ID}, {Pipeline: "fp", Stage: "s"}, {Class: "final"}, {ErrorContains: "BILLING"},
		{States: both}, {States: []redrive.State{redrive.StateCanceled}},
		{Fingerprint: "order <n> of customer <n>: status 503 from billing"},
	} {
		got, err := h.s.FailureGroups(h.ctx, f)
		if err != nil {
			h.Fatalf("FailureGroups(%+v): %v", f, err)
		}
		// The Go grouping of the exact messages, narrowed to the
		// fingerprint afterwards: DeadErrors knows no fingerprint.
		exact := f
		exact.Fingerprint = ""
		d, err := h.s.DeadErrors(h.ctx, exact)
		if err != nil {
			h.Fatal(err)
		}
		a, err := h.s.AttemptErrors(h.ctx, exact)
		if err != nil {
			h.Fatal(err)
		}
		want := redrive.GroupErrors(d, a)
		if f.Fingerprint != "" {
			want = slices.DeleteFunc(want, func(g redrive.ErrorGroup) bool { return g.Fingerprint != f.Fingerprint })
		}
		if len(want) == 0 {
			h.Fatalf("filter %+v selects no failure: the test is wrong", f)
		}
		if !slices.Equal(causes(got), causes(want)) {
			h.Errorf("FailureGroups(%+v) =\n%+v\nwant (grouped in Go)\n%+v", f, causes(got), causes(want))
		}
		for _, g := range got {
			if len(g.Examples) == 0 || len(g.Examples) != len(g.ExampleItems) || g.Messages < len(g.Examples) {
				h.Errorf("group %q: examples %q of items %v, %d messages", g.Fingerprint, g.Examples, g.ExampleItems, g.Messages)
			}
			for _, e := range g.Examples {
				if redrive.Fingerprint(e) != g.Fingerprint {
					h.Errorf("group %q has example %q", g.Fingerprint, e)
				}
			}
		}
	}

	// The fingerprint filter selects the dead items whose reason has that
	// fingerprint, in ID order, and counts them.
	all, err := h.s.ListItems(h.ctx, redrive.ItemFilter{States: dead, Limit: 1000})
	if err != nil {
		h.Fatal(err)
	}
	byFP := map[string][]int64{}
	for _, it := range all {
		fp := redrive.Fingerprint(it.Reason.Error)
		byFP[fp] = append(byFP[fp], it.ID)
	}
	if len(byFP) < 4 {
		h.Fatalf("dead items fall in %d groups, want at least 4", len(byFP))
	}
	for fp, want := range byFP {
		f := redrive.ItemFilter{States: dead, Fingerprint: fp}
		got, err := h.s.ListItems(h.ctx, f)
		if err != nil {
			h.Fatal(err)
		}
		if !slices.Equal(itemIDs(got), want) {
			h.Errorf("ListItems(fingerprint %q) = %v, want %v", fp, itemIDs(got), want)
		}
		if n, err := h.s.Count(h.ctx, f); err != nil || n != len(want) {
			h.Errorf("Count(fingerprint %q) = %d, %v; want %d", fp, n, err, len(want))
		}
		groups, err := h.s.FailureGroups(h.ctx, f)
		if err != nil || len(groups) == 0 {
			h.Fatalf("FailureGroups(fingerprint %q) = %+v, %v", fp, groups, err)
		}
		// The newest death of the group is the first example.
		newest := want[len(want)-1]
		for _, g := range groups {
			if g.Dead > 0 && slices.Contains(g.ExampleItems, newest) && g.ExampleItems[0] != newest {
				h.Errorf("group %q: examples of items %v, want the newest (%d) first", fp, g.ExampleItems, newest)
			}
		}
	}
	if n, err := h.s.Count(h.ctx, redrive.ItemFilter{Fingerprint: "no such cause"}); err != nil || n != 0 {
		h.Errorf("Count(unknown fingerprint) = %d, %v", n, err)
	}

	// A redriven item has no reason, so no fingerprint: it leaves its group.
	fp := "item <n>: malformed model output at byte <n>"
	before, err := h.s.Count(h.ctx, redrive.ItemFilter{States: dead, Fingerprint: fp})
	if err != nil || before == 0 {
		h.Fatalf("Count(%q) = %d, %v", fp, before, err)
	}
	if n, err := h.s.Redrive(h.ctx, redrive.ItemFilter{Fingerprint: fp}, at(time.Hour), 0); err != nil || n != before {
		h.Fatalf("Redrive(fingerprint) = %d, %v; want %d", n, err, before)
	}
	groups, err := h.s.FailureGroups(h.ctx, redrive.ItemFilter{Fingerprint: fp})
	if err != nil {
		h.Fatal(err)
	}
	for _, g := range groups {
		if g.Dead != 0 {
			h.Errorf("after the redrive, group %q counts %d dead", fp, g.Dead)
		}
	}
}
