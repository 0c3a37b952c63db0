package storetest

import (
	"errors"
	"fmt"
	"time"

	"github.com/redrive/redrive"
)

// testOrderAt: an item's own order time (NewItem.OrderAt, default the
// enqueue time) orders claims among due items of equal priority, and
// stays with the item through retries, later stages and redrives.
func testOrderAt(h *h) {
	r := h.run("p", "")
	t0 := Base
	// Enqueued first but ordered last; enqueued last but submitted a day
	// before the others.
	late := h.enqueue(r, "a", t0, redrive.NewItem{Key: "late", OrderAt: t0.Add(time.Hour)})[0]
	plain := h.enqueue(r, "a", t0.Add(time.Second), redrive.NewItem{Key: "plain"})[0]
	old := h.enqueue(r, "a", t0.Add(2*time.Second), redrive.NewItem{Key: "old", OrderAt: t0.Add(-24 * time.Hour)})[0]
	high := h.enqueue(r, "a", t0.Add(3*time.Second), redrive.NewItem{Key: "high", Priority: 1, OrderAt: t0.Add(2 * time.Hour)})[0]

	h.equalTime("OrderAt by default", h.item(plain).OrderAt, t0.Add(time.Second))
	h.equalTime("EnqueuedAt with OrderAt", h.item(old).EnqueuedAt, t0.Add(2*time.Second))
	h.equalTime("OrderAt", h.item(old).OrderAt, t0.Add(-24*time.Hour))

	now := t0.Add(time.Minute)
	ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 10, Now: now})
	// Priority first, then order time.
	h.equalIDs("claim order", ids(ls), []int64{high, old, plain, late})
	if len(ls) != 4 {
		h.FailNow()
	}
	h.equalTime("lease OrderAt", ls[1].Item.OrderAt, t0.Add(-24*time.Hour))

	// old retries, plain moves to stage b, late succeeds; a new item comes.
	h.complete(retry(ls[1], now, now.Add(time.Minute), "e"), advance(ls[2], now, "b", nil),
		succeed(ls[3], now), succeed(ls[0], now))
	fresh := h.enqueue(r, "a", now, redrive.NewItem{Key: "fresh"})[0]
	ls = h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 10, Now: now.Add(2 * time.Minute)})
	h.equalIDs("claim after a retry and a stage", ids(ls), []int64{old, plain, fresh})
	for _, l := range ls {
		if l.Item.ID == old {
			h.equalTime("OrderAt after a retry", l.Item.OrderAt, t0.Add(-24*time.Hour))
		}
		if l.Item.ID == plain {
			h.equalTime("OrderAt at the next stage", l.Item.OrderAt, t0.Add(time.Second))
		}
	}
	// A redriven item keeps its order time.
	if len(ls) == 3 {
		h.complete(kill(ls[0], now, "final", "bad"), succeed(ls[1], now), succeed(ls[2], now))
	}
	if n, err := h.s.Redrive(h.ctx, redrive.ItemFilter{RunID: r.ID}, now.Add(time.Hour), 0); err != nil || n != 1 {
		h.Fatalf("Redrive = %d, %v", n, err)
	}
	h.equalTime("OrderAt after a redrive", h.item(old).OrderAt, t0.Add(-24*time.Hour))
}

// testClaimWaitingBacklog: items waiting on a backoff are never claimed
// early, and once they come due in numbers larger than one claim's
// promotion step they are all claimed, every claim returning a full batch
// while due items remain, before a newer item due at the same moment.
func testClaimWaitingBacklog(h *h) {
	r := h.run("p", "")
	const n, limit = 2500, 100
	t0 := Base
	h.enqueueN(r, "a", t0, n)
	ls := h.claimAll("p", t0)
	if len(ls) != n {
		h.Fatalf("claimed %d of %d", len(ls), n)
	}
	// All of them retry: the later an item's order time, the sooner it
	// is due, so that the order of promotion (due time) is the reverse of
	// the claim order (order time).
	cs := make([]redrive.Completion, len(ls))
	for i, l := range ls {
		cs[i] = retry(l, t0, t0.Add(time.Hour-time.Duration(i)*time.Millisecond), "down")
	}
	h.complete(cs...)
	waiting := ids(ls)

	// A fresh item, due at once, is claimed past the whole waiting backlog.
	fresh := h.enqueue(r, "a", t0.Add(time.Minute), redrive.NewItem{Key: "fresh"})[0]
	got := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: limit, Now: t0.Add(time.Minute)})
	h.equalIDs("claim with a waiting backlog", ids(got), []int64{fresh})
	if got := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: limit, Now: t0.Add(59 * time.Minute)}); len(got) != 0 {
		h.Errorf("claimed %d items before they were due", len(got))
	}
	h.equalTime("OldestDue before the backlog is due", zeroOr(h, t0.Add(59*time.Minute)), time.Time{})

	// The backlog comes due; a newer item is enqueued at that moment.
	due := t0.Add(2 * time.Hour)
	newer := h.enqueue(r, "a", due, redrive.NewItem{Key: "newer"})[0]
	h.equalTime("OldestDue", zeroOr(h, due), t0.Add(time.Hour-time.Duration(n-1)*time.Millisecond))
	var order []int64
	for len(order) < n+1 {
		got := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: limit, Now: due})
		if len(got) != min(limit, n+1-len(order)) {
			h.Fatalf("claim %d returned %d items with %d due", len(order)/limit, len(got), n+1-len(order))
		}
		order = append(order, ids(got)...)
	}
	// Every waiting item comes before the newer item, which comes last:
	// promotion outpaces claims. (Among the waiting items themselves the
	// order is exact only for as many as one promotion step takes.)
	h.equalIDs("claims of the due backlog", sorted(order[:n]), sorted(waiting))
	if order[n] != newer {
		h.Errorf("last claimed %d, want the newer item %d", order[n], newer)
	}
	if got := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: limit, Now: due}); len(got) != 0 {
		h.Errorf("claimed %d items after the backlog was drained", len(got))
	}
}

func zeroOr(h *h, now time.Time) time.Time {
	h.Helper()
	t, err := h.s.OldestDue(h.ctx, now)
	if err != nil {
		h.Fatal(err)
	}
	return t
}

// testDeleteFinishedRuns: retention by run deletes the finished items of
// runs that finished before the cutoff, batch by batch, with their
// attempts, and then the runs; running runs, later runs and unfinished
// items stay.
func testDeleteFinishedRuns(h *h) {
	type fixture struct {
		run redrive.Run
		ids []int64
	}
	// Each run gets a succeeded, a dead and a canceled item, and one left
	// pending.
	mk := func(p string, finish redrive.RunStatus, at time.Time) fixture {
		r := h.run(p, "")
		ids := h.enqueueN(r, "a", Base, 4)
		ls := h.claim(redrive.ClaimRequest{Pipelines: []string{p}, Limit: 3, Now: Base})
		h.complete(succeed(ls[0], Base), kill(ls[1], Base, "final", "bad"),
			redrive.Completion{ItemID: ls[2].Item.ID, Token: ls[2].Token, State: redrive.StateCanceled, Stage: "a", Attempt: 1, Now: Base,
				Reason: &redrive.Reason{Stage: "a", Class: redrive.ClassCanceled, Error: "stop", At: Base},
				Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: redrive.OutcomeDead, Class: redrive.ClassCanceled, StartedAt: Base, FinishedAt: Base}})
		if finish != redrive.RunRunning {
			if finish != redrive.RunAborted {
				if _, err := h.s.CancelPending(h.ctx, redrive.ItemFilter{RunID: r.ID, States: []redrive.State{redrive.StatePending}},
					redrive.Reason{Class: redrive.ClassCanceled, Error: "done", At: Base}); err != nil {
					h.Fatal(err)
				}
			}
			if err := h.s.SetRunStatus(h.ctx, r.ID, finish, "", at); err != nil {
				h.Fatal(err)
			}
		}
		return fixture{r, ids}
	}
	old := mk("old", redrive.RunCompleted, at(time.Hour))
	aborted := mk("aborted", redrive.RunAborted, at(time.Hour))
	recent := mk("recent", redrive.RunFailed, at(3*time.Hour))
	running := mk("running", redrive.RunRunning, time.Time{})

	total, runs := 0, 0
	for range 10 {
		n, r, err := h.s.DeleteFinishedRuns(h.ctx, at(2*time.Hour), 2)
		if err != nil {
			h.Fatalf("DeleteFinishedRuns: %v", err)
		}
		if n > 2 {
			h.Fatalf("DeleteFinishedRuns(limit 2) deleted %d items", n)
		}
		total, runs = total+n, runs+r
		if n < 2 {
			break
		}
	}
	// old: 4 finished items; aborted: 3 finished, 1 pending.
	if total != 7 || runs != 1 {
		h.Errorf("deleted %d items and %d runs; want 7 and 1", total, runs)
	}
	if _, err := h.s.GetRun(h.ctx, old.run.ID); !errors.Is(err, redrive.ErrNotFound) {
		h.Errorf("GetRun(deleted run) = %v; want ErrNotFound", err)
	}
	for _, id := range old.ids {
		if _, err := h.s.GetItem(h.ctx, id); !errors.Is(err, redrive.ErrNotFound) {
			h.Errorf("GetItem(%d) of a deleted run = %v; want ErrNotFound", id, err)
		}
		if as := h.attempts(id); len(as) != 0 {
			h.Errorf("attempts of deleted item %d kept: %d", id, len(as))
		}
	}
	if r := h.getRun(aborted.run.ID); r.Counts.Total != 1 || r.Counts.Pending != 1 {
		h.Errorf("aborted run with a pending item: counts %+v; want the pending item alone", r.Counts)
	}
	for _, f := range []fixture{recent, running} {
		r := h.getRun(f.run.ID)
		if r.Counts.Total != 4 {
			h.Errorf("run %s lost items: %+v", r.Pipeline, r.Counts)
		}
		for _, id := range f.ids[:3] {
			if len(h.attempts(id)) != 1 {
				h.Errorf("run %s: item %d lost its attempt", r.Pipeline, id)
			}
		}
	}
	// Nothing more to delete at that cutoff; a later one takes the rest.
	if n, r, err := h.s.DeleteFinishedRuns(h.ctx, at(2*time.Hour), 0); err != nil || n != 0 || r != 0 {
		h.Errorf("second DeleteFinishedRuns = %d, %d, %v; want nothing", n, r, err)
	}
	if n, r, err := h.s.DeleteFinishedRuns(h.ctx, at(4*time.Hour), 0); err != nil || n != 4 || r != 1 {
		h.Errorf("DeleteFinishedRuns(later) = %d, %d, %v; want 4 items of 1 run", n, r, err)
	}
	if _, _, err := h.s.DeleteFinishedRuns(h.ctx, Base, -1); err == nil {
		h.Errorf("DeleteFinishedRuns(limit -1) succeeded")
	}
}

// testLargeEnqueue: a large enqueue (which a store may send another way
// than a small one) returns increasing IDs in input order and stores every
// field: payloads, priorities, order times and invalid items as dead.
func testLargeEnqueue(h *h) {
	r := h.run("p", "")
	in := make([]redrive.NewItem, 3000)
	for i := range in {
		in[i].Payload = []byte(fmt.Sprintf(`{"n":%d}`, i))
		switch i % 100 {
		case 7:
			in[i].Invalid = fmt.Sprintf("line %d: not JSON", i)
		case 8:
			in[i].Priority = 2
		case 9:
			in[i].OrderAt = Base.Add(-time.Hour)
		}
	}
	ids := h.enqueue(r, "a", Base, in...)
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			h.Fatalf("IDs not increasing at %d: %d after %d", i, ids[i], ids[i-1])
		}
	}
	for _, i := range []int{0, 7, 8, 9, 2999} {
		it := h.item(ids[i])
		if string(it.Payload) != string(in[i].Payload) || string(it.Input) != string(in[i].Payload) || it.Priority != in[i].Priority {
			h.Errorf("item %d = %+v", i, it)
		}
		want := Base
		if i == 9 {
			want = Base.Add(-time.Hour)
		}
		h.equalTime("OrderAt", it.OrderAt, want)
		if i == 7 {
			if it.State != redrive.StateDead || it.Reason == nil || it.Reason.Class != redrive.ClassInvalidInput || it.Reason.Error != in[i].Invalid {
				h.Errorf("invalid item = %+v, reason %+v", it, it.Reason)
			}
		} else if it.State != redrive.StatePending {
			h.Errorf("item %d state %s", i, it.State)
		}
	}
	c := h.getRun(r.ID).Counts
	checkCounts(h, c)
	if c.Total != 3000 || c.Dead != 30 || c.Pending != 2970 {
		h.Errorf("counts %+v; want 3000 = 2970 pending + 30 dead", c)
	}
	ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 40, Now: Base})
	if len(ls) != 40 || ls[0].Item.Priority != 2 || ls[30].Item.ID != ids[9] {
		h.Errorf("claim after a large enqueue: %d leases, first priority %d, 31st %d (want item %d)",
			len(ls), ls[0].Item.Priority, ls[30].Item.ID, ids[9])
	}
}
