package storetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redrive/redrive"
)

// testFailureCounts: the error groups a store reports for filters of run,
// pipeline, stage, class, fingerprint and the dead and canceled states
// (which a store may keep counted as failures are written) equal a recount
// of the rows (DeadErrors and AttemptErrors grouped in Go), after every
// round of seeded random transitions: deaths, retries, successes, moves to
// the next stage, invalid inputs, cancels, redrives, purges, retention
// deletes of succeeded items and of finished runs. So does Count of those
// states, against the items listed.
func testFailureCounts(h *h) {
	rng := rand.New(rand.NewPCG(15, 2026))
	runs := []redrive.Run{h.run("fca", "one"), h.run("fca", "two"), h.run("fcb", "three")}
	messages := []string{
		"order %d of customer %d: status 503 from billing",
		"order %d of customer %d: status 429 from billing",
		"item %d: malformed model output at byte %d",
		`GET http://10.0.0.%d:8080/v1/x?page=%d: connection refused`,
	}
	classes := []string{"final", "retryable", "rate_limited"}
	msg := func() string {
		return fmt.Sprintf(messages[rng.IntN(len(messages))], rng.IntN(1000), rng.IntN(1000))
	}
	now := Base
	for _, r := range runs {
		h.enqueueN(r, "s1", now, 20)
		h.enqueue(r, "s1", now, redrive.NewItem{Invalid: fmt.Sprintf("line %d: unexpected token", rng.IntN(100))})
	}

	dead := []redrive.State{redrive.StateDead}
	both := []redrive.State{redrive.StateDead, redrive.StateCanceled}
	check := func(round int) {
		h.Helper()
		filters := []redrive.ItemFilter{{}, {States: both}, {States: []redrive.State{redrive.StateCanceled}},
			{Pipeline: "fca"}, {Pipeline: "fca", Stage: "s2"}, {Stage: "s1", States: both}, {Class: "final"},
			{Class: "retryable", States: both}}
		for _, r := range runs {
			filters = append(filters, redrive.ItemFilter{RunID: r.ID}, redrive.ItemFilter{RunID: r.ID, States: both, Stage: "s2"})
		}
		all, err := h.s.FailureGroups(h.ctx, redrive.ItemFilter{States: both})
		if err != nil {
			h.Fatalf("round %d: FailureGroups: %v", round, err)
		}
		for _, g := range all[:min(len(all), 3)] {
			filters = append(filters, redrive.ItemFilter{Fingerprint: g.Fingerprint, States: both},
				redrive.ItemFilter{Fingerprint: g.Fingerprint, Pipeline: g.Pipeline, Class: g.Class})
		}
		for _, f := range filters {
			got, err := h.s.FailureGroups(h.ctx, f)
			if err != nil {
				h.Fatalf("round %d: FailureGroups(%+v): %v", round, f, err)
			}
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
			if !slices.Equal(groupCounts(got), groupCounts(want)) {
				h.Errorf("round %d: FailureGroups(%+v) =\n%+v\nwant (recounted)\n%+v", round, f, groupCounts(got), groupCounts(want))
			}
			// Count of dead or canceled items, which a store may take
			// from the same kept counts, is the items listed.
			if len(f.States) > 0 {
				listed := len(h.list(f))
				for _, limit := range []int{0, 3} {
					c := f
					c.Limit = limit
					want := listed
					if limit > 0 {
						want = min(listed, limit)
					}
					if n := h.count(c); n != want {
						h.Errorf("round %d: Count(%+v) = %d, want %d (listed)", round, c, n, want)
					}
				}
			}
		}
	}

	check(0)
	for round := 1; round <= 8; round++ {
		now = now.Add(time.Minute)
		for _, p := range []string{"fca", "fcb"} {
			var cs []redrive.Completion
			for _, l := range h.claimAll(p, now) {
				switch k := rng.IntN(10); {
				case k < 3:
					if l.Item.Stage == "s1" {
						cs = append(cs, advance(l, now, "s2", nil))
					} else {
						cs = append(cs, succeed(l, now))
					}
				case k < 6:
					cs = append(cs, retry(l, now, now.Add(time.Second), msg()))
				case k < 9:
					cs = append(cs, kill(l, now, classes[rng.IntN(len(classes))], msg()))
				default:
					// Left leased: it expires and is claimed again later.
				}
			}
			h.complete(cs...)
		}
		r := runs[rng.IntN(len(runs))]
		if pending := h.list(redrive.ItemFilter{RunID: r.ID, States: []redrive.State{redrive.StatePending}}); len(pending) > 0 {
			n := 1 + rng.IntN(min(3, len(pending)))
			if _, err := h.s.CancelPending(h.ctx, redrive.ItemFilter{IDs: itemIDs(pending[:n])},
				redrive.Reason{Class: redrive.ClassCanceled, Error: fmt.Sprintf("operator canceled %d items", n), At: now}); err != nil {
				h.Fatal(err)
			}
		}
		h.enqueue(runs[rng.IntN(len(runs))], "s1", now, redrive.NewItem{Invalid: fmt.Sprintf("line %d: unexpected token", rng.IntN(100))})
		switch round % 4 {
		case 1:
			if _, err := h.s.Redrive(h.ctx, redrive.ItemFilter{RunID: runs[rng.IntN(len(runs))].ID, Class: "retryable", States: both}, now, 0); err != nil {
				h.Fatal(err)
			}
		case 2:
			if _, err := h.s.Purge(h.ctx, redrive.ItemFilter{Pipeline: "fca", Class: "rate_limited", States: dead}); err != nil {
				h.Fatal(err)
			}
		case 3:
			if _, err := h.s.DeleteSucceeded(h.ctx, now.Add(time.Second), 5); err != nil {
				h.Fatal(err)
			}
		case 0:
			if _, err := h.s.Redrive(h.ctx, redrive.ItemFilter{Stage: "s2"}, now, 0); err != nil {
				h.Fatal(err)
			}
		}
		check(round)
	}

	// Retention of a finished run deletes its dead and canceled items and
	// their failed attempts: their groups shrink or go.
	if ok, err := h.s.FinishRun(h.ctx, runs[2].ID, redrive.RunFailed, "", now); !ok || err != nil {
		h.Fatalf("FinishRun = %v, %v", ok, err)
	}
	if _, _, err := h.s.DeleteFinishedRuns(h.ctx, now.Add(time.Hour), 0); err != nil {
		h.Fatal(err)
	}
	if groups, err := h.s.FailureGroups(h.ctx, redrive.ItemFilter{Pipeline: "fcb", States: both}); err != nil || len(groups) != 0 {
		h.Errorf("after deleting run %d, its pipeline's groups are %+v, %v; want none", runs[2].ID, groupCounts(groups), err)
	}
	check(9)
	if gs, err := h.s.FailureGroups(h.ctx, redrive.ItemFilter{States: both}); err != nil || len(gs) < 4 {
		h.Fatalf("FailureGroups at the end = %+v, %v; want at least 4 groups: the test is wrong", groupCounts(gs), err)
	}
}

// groupCount is an error group without its examples.
type groupCount struct {
	p, s, c, fp    string
	dead, failures int
}

func groupCounts(gs []redrive.ErrorGroup) []groupCount {
	out := make([]groupCount, len(gs))
	for i, g := range gs {
		out[i] = groupCount{g.Pipeline, g.Stage, g.Class, g.Fingerprint, g.Dead, g.Failures}
	}
	return out
}
