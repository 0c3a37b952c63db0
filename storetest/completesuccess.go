package storetest

import (
	"slices"
	"time"

	"github.com/redrive/redrive"
)

// engineSuccess is a success as the engine completes it: the attempt
// names its item, run and pipeline and carries the stage's configuration
// hash; the item leaves with no attempts at its (possibly next) stage and
// its failed attempts of the whole pipeline unchanged. next is "" to
// finish the item at its stage, else the stage it moves to.
func engineSuccess(l redrive.Lease, start, now time.Time, hash, next string, out []byte) redrive.Completion {
	it := l.Item
	c := redrive.Completion{ItemID: it.ID, Token: l.Token, State: redrive.StateSucceeded, Stage: it.Stage,
		StageIndex: it.StageIndex, FailedAttempts: it.FailedAttempts, Payload: out, Now: now,
		Record: redrive.Attempt{ItemID: it.ID, RunID: it.RunID, Pipeline: it.Pipeline, Stage: it.Stage,
			StageIndex: it.StageIndex, Number: it.Attempt + 1, Outcome: redrive.OutcomeSucceeded,
			StartedAt: start, FinishedAt: now, ConfigHash: hash}}
	if next != "" {
		c.State, c.Stage, c.StageIndex, c.NextAt = redrive.StatePending, next, it.StageIndex+1, now
	}
	return c
}

// testCompleteSuccesses completes batches that mix the successes of two
// pipelines, several stages and configurations with failures, a stale
// token and a repeated completion, in an order that is not the items' ID
// order (a store may carry successes in a statement of their own, as
// PostgreSQL does): every applied completion records one attempt with all
// its fields, the items' states and the run counts follow, and a moved
// item is ready at its next stage at once.
func testCompleteSuccesses(h *h) {
	rp, rq := h.run("p", ""), h.run("q", "")
	// Interleaved IDs: p0-3, q0-1, p4-7, q2-3.
	p := h.enqueueN(rp, "a", Base, 4)
	q := h.enqueueN(rq, "x", Base, 2)
	p = append(p, h.enqueueN(rp, "a", Base, 4)...)
	q = append(q, h.enqueueN(rq, "x", Base, 2)...)
	// p0 failed once: a success keeps its failed attempts.
	l0 := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 1, Now: Base})
	if len(l0) != 1 || l0[0].Item.ID != p[0] {
		h.Fatalf("first claim = %v, want item %d", ids(l0), p[0])
	}
	r0 := retry(l0[0], at(time.Second), at(time.Second), "flaky")
	r0.FailedAttempts = 1
	h.complete(r0)

	start, now := at(2*time.Second), at(3*time.Second)
	by := map[int64]redrive.Lease{}
	for _, l := range h.claim(redrive.ClaimRequest{Pipelines: []string{"p", "q"}, Limit: 100, Now: start}) {
		by[l.Item.ID] = l
	}
	if len(by) != 12 {
		h.Fatalf("claimed %d items, want 12", len(by))
	}
	stale := by[p[5]]
	stale.Token += 2
	bare := succeed(by[p[7]], now) // the attempt names neither item, run nor pipeline
	bare.StageIndex, bare.Record.StartedAt = 0, start
	cs := []redrive.Completion{
		engineSuccess(by[q[1]], start, now, "hq", "y", []byte("q1-out")),
		engineSuccess(by[p[0]], start, now, "hp", "", []byte("p0-out")),
		engineSuccess(by[p[2]], start, now, "hp", "b", nil), // moves keeping its payload
		engineSuccess(by[p[1]], start, now, "hp", "b", []byte("p1-out")),
		engineSuccess(by[q[0]], start, now, "hq", "", []byte("q0-out")),
		engineSuccess(by[p[3]], start, now, "hp2", "", []byte{}),
		retry(by[p[4]], now, at(time.Hour), "timeout"),
		engineSuccess(stale, start, now, "hp", "", []byte("stale")),
		kill(by[p[6]], now, "final", "bad input"),
		bare,
		engineSuccess(by[q[3]], start, now, "hq", "y", []byte("q3-out")),
		engineSuccess(by[q[2]], start, now, "hq", "y", []byte("q2-out")),
		engineSuccess(by[q[2]], start, now, "hq", "", []byte("again")), // fenced by the one before
	}
	ap := h.complete(cs...)
	want := []bool{true, true, true, true, true, true, true, false, true, true, true, true, false}
	if !slices.Equal(ap, want) {
		h.Fatalf("applied = %v, want %v", ap, want)
	}
	h.checkSuccesses(cs, ap, map[int64][]byte{p[2]: []byte("item-2"), p[7]: []byte("item-3")})
	// One attempt per applied completion, none for the stale one.
	h.attemptCounts(map[int64]int{p[0]: 2, p[1]: 1, p[2]: 1, p[3]: 1, p[4]: 1, p[5]: 0, p[6]: 1, p[7]: 1,
		q[0]: 1, q[1]: 1, q[2]: 1, q[3]: 1})
	if c := h.getRun(rp.ID).Counts; c != (redrive.Counts{Total: 8, Succeeded: 3, Pending: 3, Dead: 1, Running: 1}) {
		h.Errorf("run p counts = %+v", c)
	}
	if c := h.getRun(rq.ID).Counts; c != (redrive.Counts{Total: 4, Succeeded: 1, Pending: 3}) {
		h.Errorf("run q counts = %+v", c)
	}
	// The moved items are due at once at their next stage, where a batch
	// of successes alone (the second stage's) finishes them.
	later := at(4 * time.Second)
	next := h.claim(redrive.ClaimRequest{Pipelines: []string{"p", "q"}, Limit: 100, Now: now})
	if got, want := sorted(ids(next)), sorted([]int64{p[1], p[2], q[1], q[2], q[3]}); !slices.Equal(got, want) {
		h.Fatalf("claimed at the next stages %v, want %v", got, want)
	}
	cs = cs[:0]
	for _, l := range next {
		cs = append(cs, engineSuccess(l, now, later, "h-"+l.Item.Stage, "", []byte("done")))
	}
	ap = h.complete(cs...)
	h.checkSuccesses(cs, ap, nil)
	h.attemptCounts(map[int64]int{p[0]: 2, p[1]: 2, p[2]: 2, p[3]: 1, p[4]: 1, p[5]: 0, p[6]: 1, p[7]: 1,
		q[0]: 1, q[1]: 2, q[2]: 2, q[3]: 2})
	if c := h.getRun(rp.ID).Counts; c != (redrive.Counts{Total: 8, Succeeded: 5, Pending: 1, Dead: 1, Running: 1}) {
		h.Errorf("run p counts after the second stage = %+v", c)
	}
	if c := h.getRun(rq.ID).Counts; c != (redrive.Counts{Total: 4, Succeeded: 4}) {
		h.Errorf("run q counts after the second stage = %+v", c)
	}
	checkCounts(h, h.getRun(rp.ID).Counts)
}

// checkSuccesses checks the items and the last attempts of the applied
// successes among cs: every field of the attempt as the completion gave
// it (run, pipeline and item from the item where it gave none), and the
// item at its new state with no reason. kept maps the items that moved
// without a new payload to the payload they kept.
func (h *h) checkSuccesses(cs []redrive.Completion, ap []bool, kept map[int64][]byte) {
	h.Helper()
	for i, c := range cs {
		if !ap[i] || c.Record.Outcome != redrive.OutcomeSucceeded {
			continue
		}
		it := h.item(c.ItemID)
		payload := c.Payload
		if payload == nil {
			payload = kept[c.ItemID]
		}
		if it.State != c.State || it.Stage != c.Stage || it.StageIndex != c.StageIndex || it.Attempt != c.Attempt ||
			it.FailedAttempts != c.FailedAttempts || it.Reason != nil || string(it.Payload) != string(payload) {
			h.Errorf("item %d after its success = %+v, want state %s at %s (#%d), attempt %d, %d failed, payload %q, no reason",
				c.ItemID, it, c.State, c.Stage, c.StageIndex, c.Attempt, c.FailedAttempts, payload)
		}
		if c.State == redrive.StatePending {
			h.equalTime("NextAt of a moved item", it.NextAt, c.Now)
		}
		h.equalTime("UpdatedAt", it.UpdatedAt, c.Now)
		as := h.attempts(c.ItemID)
		if len(as) == 0 {
			h.Errorf("item %d: no attempt recorded for its success", c.ItemID)
			continue
		}
		a, w := as[len(as)-1], c.Record
		w.ID, w.ItemID, w.RunID, w.Pipeline = a.ID, it.ID, it.RunID, it.Pipeline
		if a.ItemID != w.ItemID || a.RunID != w.RunID || a.Pipeline != w.Pipeline || a.Stage != w.Stage ||
			a.StageIndex != w.StageIndex || a.Number != w.Number || a.Outcome != w.Outcome || a.Class != "" ||
			a.Error != "" || a.Delay != w.Delay || a.ConfigHash != w.ConfigHash {
			h.Errorf("item %d: attempt %+v, want %+v", c.ItemID, a, w)
		}
		h.equalTime("attempt StartedAt", a.StartedAt, w.StartedAt)
		h.equalTime("attempt FinishedAt", a.FinishedAt, w.FinishedAt)
	}
}

// attemptCounts checks how many attempts each item has recorded.
func (h *h) attemptCounts(want map[int64]int) {
	h.Helper()
	for id, n := range want {
		if got := len(h.attempts(id)); got != n {
			h.Errorf("item %d: %d attempts, want %d", id, got, n)
		}
	}
}
