package storetest

import (
	"reflect"
	"time"

	"github.com/redrive/redrive"
)

// testClaimedItemAsStored checks that a lease's item is the item as stored
// right after the claim, field for field: a store may fill in what its claim
// wrote rather than read it back, and must fill it in as stored. The items
// cover a key, a priority, an order time, trace context, a payload moved on
// to a later stage, an earlier death and redrive (whose reason the redrive
// cleared), and a claim with and without a start.
func testClaimedItemAsStored(h *h) {
	r := h.run("p", "")
	ids := h.enqueue(r, "a", Base,
		redrive.NewItem{Key: "k1", Payload: []byte("one"), Priority: 3},
		redrive.NewItem{Payload: []byte("two"), OrderAt: at(-time.Hour),
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "rojo=00f067aa0ba902b7"},
		redrive.NewItem{Key: "k3", Payload: []byte("three")},
		redrive.NewItem{Payload: []byte("four")})
	// The third moves to stage b with a new payload; the fourth dies and
	// is redriven.
	first := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 4, Now: Base})
	var cs []redrive.Completion
	for _, l := range first {
		c := redrive.Completion{ItemID: l.Item.ID, Token: l.Token, Attempt: 1, Now: at(time.Second),
			Record: redrive.Attempt{Stage: "a", Number: 1, StartedAt: Base, FinishedAt: at(time.Second)}}
		switch l.Item.ID {
		case ids[2]:
			c.State, c.Stage, c.StageIndex, c.Attempt, c.Payload, c.NextAt = redrive.StatePending, "b", 1, 0, []byte("moved"), at(time.Second)
			c.Record.Outcome = redrive.OutcomeSucceeded
		case ids[3]:
			c.State, c.Stage, c.FailedAttempts = redrive.StateDead, "a", 1
			c.Record.Outcome, c.Record.Class, c.Record.Error = redrive.OutcomeDead, "final", "bad input"
		default:
			c.State, c.Stage, c.NextAt = redrive.StatePending, "a", at(time.Second)
			c.Record.Outcome, c.Record.Class, c.Record.Error = redrive.OutcomeRetry, "retryable", "timeout"
			c.FailedAttempts = 1
		}
		cs = append(cs, c)
	}
	for i, ok := range h.complete(cs...) {
		if !ok {
			h.Fatalf("completion %d not applied", i)
		}
	}
	if n, err := h.s.Redrive(h.ctx, redrive.ItemFilter{RunID: r.ID, States: []redrive.State{redrive.StateDead}}, at(time.Second), 0); err != nil || n != 1 {
		h.Fatalf("Redrive = %d, %v; want 1", n, err)
	}
	for _, started := range []time.Time{{}, at(3 * time.Second)} {
		now := at(2 * time.Second)
		ls := h.claim(redrive.ClaimRequest{Owner: "worker-2", Pipelines: []string{"p"}, Limit: 2, Now: now,
			LeaseUntil: now.Add(time.Minute), StartedAt: started})
		if len(ls) != 2 {
			h.Fatalf("claimed %d, want 2", len(ls))
		}
		for _, l := range ls {
			got, want := utcItem(l.Item), utcItem(h.item(l.Item.ID))
			if !reflect.DeepEqual(got, want) {
				h.Errorf("leased item %d (start %v)\n got %+v\nwant %+v (as stored)", l.Item.ID, started, got, want)
			}
			if got.State != redrive.StateRunning || got.LeaseOwner != "worker-2" || got.Reason != nil {
				h.Errorf("leased item %d: state %s, owner %q, reason %+v", l.Item.ID, got.State, got.LeaseOwner, got.Reason)
			}
		}
	}
}

// utcItem returns it with its times in UTC, so that items read by
// different queries compare equal when they hold the same instants.
func utcItem(it redrive.Item) redrive.Item {
	for _, t := range []*time.Time{&it.EnqueuedAt, &it.OrderAt, &it.NextAt, &it.LeaseExpiresAt, &it.AttemptStartedAt, &it.UpdatedAt} {
		if !t.IsZero() {
			*t = t.UTC()
		}
	}
	if it.Reason != nil {
		r := *it.Reason
		r.At = r.At.UTC()
		it.Reason = &r
	}
	return it
}
