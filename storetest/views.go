package storetest

import (
	"errors"
	"slices"
	"time"

	"github.com/redrive/redrive"
)

// testTimeline: attempts are counted by pipeline, stage, bucket and
// outcome; since is inclusive and until exclusive; run and pipeline
// filters apply; an unanswerable filter is refused with ErrBadFilter.
func testTimeline(h *h) {
	p := h.run("p", "")
	q := h.run("q", "")
	h.enqueueN(p, "a", Base, 6)
	h.enqueueN(q, "x", Base, 1)
	type done struct {
		state   redrive.State
		outcome redrive.Outcome
		at      time.Duration
	}
	plan := []done{
		{redrive.StateSucceeded, redrive.OutcomeSucceeded, 10 * time.Second},
		{redrive.StatePending, redrive.OutcomeRetry, 70 * time.Second},
		{redrive.StateDead, redrive.OutcomeDead, 75 * time.Second},
		{redrive.StatePending, redrive.OutcomeRateLimited, 130 * time.Second},
		{redrive.StateSucceeded, redrive.OutcomeSucceeded, time.Minute - time.Millisecond},
		{redrive.StateSucceeded, redrive.OutcomeSucceeded, 3 * time.Minute}, // at until: not counted
	}
	ls := h.claimAll("p", Base)
	if len(ls) != len(plan) {
		h.Fatalf("claimed %d, want %d", len(ls), len(plan))
	}
	var cs []redrive.Completion
	for i, l := range ls {
		d := plan[i]
		c := redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: d.state, Stage: "a", Attempt: 1, NextAt: at(time.Hour), Now: at(d.at),
			Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: d.outcome, StartedAt: at(d.at - time.Second), FinishedAt: at(d.at)}}
		if d.state == redrive.StateDead {
			c.Reason = &redrive.Reason{Stage: "a", Class: "final", Error: "boom", Attempts: 1, At: at(d.at)}
		}
		cs = append(cs, c)
	}
	lq := h.claimAll("q", Base)
	cs = append(cs, redrive.Completion{ItemID: lq[0].Item.ID, Token: lq[0].Token, State: redrive.StateSucceeded, Stage: "x", Attempt: 1, Now: at(20 * time.Second),
		Record: redrive.Attempt{Stage: "x", Number: 1, Outcome: redrive.OutcomeSucceeded, StartedAt: at(19 * time.Second), FinishedAt: at(20 * time.Second)}})
	h.complete(cs...)

	f := redrive.TimelineFilter{Pipeline: "p", Since: Base, Until: at(3 * time.Minute), Step: time.Minute}
	got, err := h.s.Timeline(h.ctx, f)
	if err != nil {
		h.Fatalf("Timeline: %v", err)
	}
	want := []redrive.TimelineBucket{
		{Pipeline: "p", Stage: "a", Bucket: 0, Start: Base, Attempts: 2, Succeeded: 2},
		{Pipeline: "p", Stage: "a", Bucket: 1, Start: at(time.Minute), Attempts: 2, Retried: 1, Dead: 1},
		{Pipeline: "p", Stage: "a", Bucket: 2, Start: at(2 * time.Minute), Attempts: 1, RateLimited: 1},
	}
	if !timelineEqual(got, want) {
		h.Errorf("Timeline(%+v) =\n%+v\nwant\n%+v", f, got, want)
	}

	// Every pipeline, one run, a later since: buckets count from since.
	f = redrive.TimelineFilter{RunID: q.ID, Since: at(15 * time.Second), Until: at(time.Hour), Step: 10 * time.Second}
	got, err = h.s.Timeline(h.ctx, f)
	if err != nil {
		h.Fatalf("Timeline: %v", err)
	}
	want = []redrive.TimelineBucket{{Pipeline: "q", Stage: "x", Bucket: 0, Start: at(15 * time.Second), Attempts: 1, Succeeded: 1}}
	if !timelineEqual(got, want) {
		h.Errorf("Timeline(%+v) = %+v, want %+v", f, got, want)
	}
	f = redrive.TimelineFilter{Since: Base, Until: at(10 * time.Minute), Step: time.Hour}
	if got, err = h.s.Timeline(h.ctx, f); err != nil || len(got) != 2 || got[0].Attempts != 6 || got[1].Attempts != 1 {
		h.Errorf("Timeline(every pipeline, one bucket) = %+v, %v; want p/a 6, q/x 1", got, err)
	}

	for _, bad := range []redrive.TimelineFilter{
		{Until: at(time.Hour), Step: time.Minute},
		{Since: at(time.Hour), Until: Base, Step: time.Minute},
		{Since: Base, Until: at(time.Hour), Step: time.Second},
		{Since: Base, Until: at(time.Hour)},
	} {
		if _, err := h.s.Timeline(h.ctx, bad); !errors.Is(err, redrive.ErrBadFilter) {
			h.Errorf("Timeline(%+v) error = %v, want ErrBadFilter", bad, err)
		}
	}
}

func timelineEqual(got, want []redrive.TimelineBucket) bool {
	return slices.EqualFunc(got, want, func(a, b redrive.TimelineBucket) bool {
		s := a.Start
		a.Start = b.Start
		return a == b && s.Equal(b.Start) && s.Location() == time.UTC
	})
}

// testLeaseLoads: running items are counted by owner, pipeline and stage,
// with the smallest IDs as a sample and the expired leases counted.
func testLeaseLoads(h *h) {
	if got, err := h.s.LeaseLoads(h.ctx, Base, 3); err != nil || len(got) != 0 {
		h.Fatalf("LeaseLoads of a new store = %+v, %v", got, err)
	}
	p := h.run("p", "")
	ids := h.enqueueN(p, "a", Base, 6)
	l1 := h.claim(redrive.ClaimRequest{Owner: "w1", Pipelines: []string{"p"}, Limit: 3, Now: Base, LeaseUntil: at(time.Minute)})
	l2 := h.claim(redrive.ClaimRequest{Owner: "w2", Pipelines: []string{"p"}, Limit: 2, Now: Base, LeaseUntil: at(10 * time.Second)})
	if len(l1) != 3 || len(l2) != 2 {
		h.Fatalf("claimed %d and %d, want 3 and 2", len(l1), len(l2))
	}
	got, err := h.s.LeaseLoads(h.ctx, at(30*time.Second), 2)
	if err != nil {
		h.Fatal(err)
	}
	want := []redrive.LeaseLoad{
		{Owner: "w1", Pipeline: "p", Stage: "a", Count: 3, ItemIDs: ids[:2]},
		{Owner: "w2", Pipeline: "p", Stage: "a", Count: 2, ItemIDs: ids[3:5], Expired: 2},
	}
	if !leaseLoadsEqual(got, want) {
		h.Errorf("LeaseLoads = %+v, want %+v", got, want)
	}
	// Finished items leave; without a sample no IDs are listed.
	h.complete(redrive.Completion{ItemID: l1[0].Item.ID, Token: l1[0].Token, State: redrive.StateSucceeded, Stage: "a", Attempt: 1, Now: at(time.Second),
		Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: redrive.OutcomeSucceeded, StartedAt: Base, FinishedAt: at(time.Second)}})
	got, err = h.s.LeaseLoads(h.ctx, Base, 0)
	if err != nil {
		h.Fatal(err)
	}
	want = []redrive.LeaseLoad{
		{Owner: "w1", Pipeline: "p", Stage: "a", Count: 2, ItemIDs: []int64{}},
		{Owner: "w2", Pipeline: "p", Stage: "a", Count: 2, ItemIDs: []int64{}},
	}
	if !leaseLoadsEqual(got, want) {
		h.Errorf("LeaseLoads(sample 0) = %+v, want %+v", got, want)
	}
}

func leaseLoadsEqual(got, want []redrive.LeaseLoad) bool {
	return slices.EqualFunc(got, want, func(a, b redrive.LeaseLoad) bool {
		return a.Owner == b.Owner && a.Pipeline == b.Pipeline && a.Stage == b.Stage && a.Count == b.Count &&
			a.Expired == b.Expired && slices.Equal(a.ItemIDs, b.ItemIDs)
	})
}

// testPauseReason: a pause keeps its reason.
func testPauseReason(h *h) {
	p := redrive.StagePause{Pipeline: "p", Stage: "a", By: "ops", At: at(time.Minute), Reason: "the API is down"}
	if ok, err := h.s.PauseStage(h.ctx, p); err != nil || !ok {
		h.Fatalf("PauseStage = %v, %v", ok, err)
	}
	got, err := h.s.PausedStages(h.ctx)
	if err != nil || len(got) != 1 || got[0].Reason != p.Reason || got[0].By != "ops" {
		h.Errorf("PausedStages = %+v, %v; want the reason %q", got, err, p.Reason)
	}
}
