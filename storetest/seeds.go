package storetest

import (
	"fmt"
	"time"

	"github.com/redrive/redrive"
)

// testSeeds pins down what the design records' features need from a store:
// an item's failed attempts over all its stages (Pipeline.MaxAttempts,
// ADR-0010) are stored by Complete, returned by every read of an item and
// reset by Redrive; each attempt's stage configuration hash (ADR-003's
// stage_config_hash) is stored and read back with the attempt.
func testSeeds(h *h) {
	r := h.run("p", "")
	ids := h.enqueueN(r, "a", at(0), 3)
	ls := h.claimAll("p", at(time.Second))
	if len(ls) != 3 {
		h.Fatalf("claimed %d items, want 3", len(ls))
	}
	for _, l := range ls {
		if l.Item.FailedAttempts != 0 {
			h.Errorf("new item %d: FailedAttempts %d, want 0", l.Item.ID, l.Item.FailedAttempts)
		}
	}
	// One Complete call with several items, so that batch statements are
	// exercised: item 0 retries at stage a (its first failure), item 1
	// moves on to stage b carrying two earlier failures, item 2 dies with
	// four.
	now := at(2 * time.Second)
	rec := func(l redrive.Lease, outcome redrive.Outcome, hash string) redrive.Attempt {
		return redrive.Attempt{Stage: "a", Number: l.Item.Attempt + 1, Outcome: outcome, Class: "retryable",
			Error: "boom", StartedAt: now, FinishedAt: now, ConfigHash: hash}
	}
	ap := h.complete(
		redrive.Completion{ItemID: ls[0].Item.ID, Token: ls[0].Token, State: redrive.StatePending, Stage: "a",
			Attempt: 1, FailedAttempts: 1, NextAt: now, Now: now, Record: rec(ls[0], redrive.OutcomeRetry, "00000000000000a1")},
		redrive.Completion{ItemID: ls[1].Item.ID, Token: ls[1].Token, State: redrive.StatePending, Stage: "b", StageIndex: 1,
			FailedAttempts: 2, NextAt: now, Now: now, Payload: []byte("out"),
			Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: redrive.OutcomeSucceeded, StartedAt: now, FinishedAt: now,
				ConfigHash: "00000000000000b2"}},
		redrive.Completion{ItemID: ls[2].Item.ID, Token: ls[2].Token, State: redrive.StateDead, Stage: "a",
			Attempt: 1, FailedAttempts: 4, Now: now, Record: rec(ls[2], redrive.OutcomeDead, ""),
			Reason: &redrive.Reason{Stage: "a", Class: "retryable", Error: "attempt cap of 4 across stages reached: boom", Attempts: 1, At: now}},
	)
	for i, ok := range ap {
		if !ok {
			h.Fatalf("completion %d not applied", i)
		}
	}
	for i, want := range []int{1, 2, 4} {
		if got := h.item(ids[i]).FailedAttempts; got != want {
			h.Errorf("item %d after Complete: FailedAttempts %d, want %d", i, got, want)
		}
	}
	for i, want := range []string{"00000000000000a1", "00000000000000b2", ""} {
		as := h.attempts(ids[i])
		if len(as) != 1 || as[0].ConfigHash != want {
			h.Errorf("item %d: attempts %+v, want one with ConfigHash %q", i, as, want)
		}
	}
	// Claims and listings return the count too.
	ls = h.claimAll("p", at(3*time.Second))
	got := map[int64]int{}
	for _, l := range ls {
		got[l.Item.ID] = l.Item.FailedAttempts
	}
	if want := map[int64]int{ids[0]: 1, ids[1]: 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		h.Errorf("claimed FailedAttempts %v, want %v", got, want)
	}
	list, err := h.s.ListItems(h.ctx, redrive.ItemFilter{RunID: r.ID})
	if err != nil {
		h.Fatal(err)
	}
	for i, it := range list {
		if want := []int{1, 2, 4}[i]; it.FailedAttempts != want {
			h.Errorf("ListItems item %d: FailedAttempts %d, want %d", it.ID, it.FailedAttempts, want)
		}
	}
	// A lease taken over by the rescuer carries the count as well.
	exp, err := h.s.ClaimExpired(h.ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 10,
		Now: at(time.Hour), LeaseUntil: at(time.Hour + time.Minute)})
	if err != nil {
		h.Fatal(err)
	}
	for _, l := range exp {
		if l.Item.FailedAttempts != got[l.Item.ID] {
			h.Errorf("ClaimExpired item %d: FailedAttempts %d, want %d", l.Item.ID, l.Item.FailedAttempts, got[l.Item.ID])
		}
	}
	if len(exp) != 2 {
		h.Fatalf("ClaimExpired took %d items, want 2", len(exp))
	}
	// A completion that is fenced off changes nothing.
	stale := redrive.Completion{ItemID: ls[0].Item.ID, Token: ls[0].Token, State: redrive.StateDead, Stage: "a",
		FailedAttempts: 9, Now: now, Record: rec(ls[0], redrive.OutcomeDead, "ffffffffffffffff")}
	if ap := h.complete(stale); ap[0] {
		h.Fatal("a completion with a stale token applied")
	}
	if n := h.item(ids[0]).FailedAttempts; n != 1 {
		h.Errorf("a fenced-off completion set FailedAttempts to %d", n)
	}
	// Redrive starts the count again, with the other counters.
	if n, err := h.s.Redrive(h.ctx, redrive.ItemFilter{RunID: r.ID}, at(2*time.Hour), 0); err != nil || n != 1 {
		h.Fatalf("Redrive = %d, %v; want 1", n, err)
	}
	if it := h.item(ids[2]); it.FailedAttempts != 0 || it.Attempt != 0 || it.State != redrive.StatePending {
		h.Errorf("redriven item: state %s, Attempt %d, FailedAttempts %d; want pending, 0, 0", it.State, it.Attempt, it.FailedAttempts)
	}
	if as := h.attempts(ids[2]); len(as) != 1 {
		h.Errorf("redrive changed the history: %d attempts", len(as))
	}
	// So does a redrive from a stage.
	ls = h.claimAll("p", at(2*time.Hour))
	if len(ls) != 1 || ls[0].Item.ID != ids[2] {
		h.Fatalf("claimed %d items after the redrive, want item %d", len(ls), ids[2])
	}
	then := at(2*time.Hour + time.Second)
	h.complete(redrive.Completion{ItemID: ids[2], Token: ls[0].Token, State: redrive.StateDead, Stage: "a",
		Attempt: 1, FailedAttempts: 3, Now: then, Record: rec(ls[0], redrive.OutcomeDead, "")})
	if n := h.item(ids[2]).FailedAttempts; n != 3 {
		h.Fatalf("FailedAttempts %d after the second death, want 3", n)
	}
	n, err := h.s.RedriveFrom(h.ctx, redrive.RedriveFromRequest{Filter: redrive.ItemFilter{RunID: r.ID}, Stage: "a", Now: then})
	if err != nil || n != 1 {
		h.Fatalf("RedriveFrom = %d, %v; want 1", n, err)
	}
	if it := h.item(ids[2]); it.FailedAttempts != 0 || it.State != redrive.StatePending {
		h.Errorf("item redriven from its stage: state %s, FailedAttempts %d; want pending, 0", it.State, it.FailedAttempts)
	}
}
