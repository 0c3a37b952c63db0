package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// After a burst of claimed items went onto a backoff, a claim that
// resumes at the first due item reads none of the dead index entries the
// burst left at the head of items_ready, which a walk from the head steps
// over.
func TestClaimResumeSkipsDeadEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	run := mustRun(t, s, "burst")
	const burst = 20000
	for range burst / 2000 {
		in := make([]redrive.NewItem, 2000)
		for i := range in {
			in[i] = redrive.NewItem{Payload: []byte(`{}`), Priority: 1}
		}
		enqueue(t, s, run, in...)
	}
	due := make([]redrive.NewItem, 100)
	for i := range due {
		due[i].Payload = []byte(`{}`)
	}
	enqueue(t, s, run, due...)
	now := t0.Add(time.Minute)
	for left := burst; left > 0; {
		ls := claim(t, s, "burst", 2000, now)
		if len(ls) == 0 {
			t.Fatalf("claimed nothing with %d of the burst left", left)
		}
		cs := make([]redrive.Completion, len(ls))
		for i, l := range ls {
			if l.Item.Priority != 1 {
				t.Fatalf("claimed a due item (priority %d) before the burst", l.Item.Priority)
			}
			cs[i] = done(l, redrive.StatePending, now)
			cs[i].NextAt = now.Add(time.Hour)
		}
		if _, err := s.Complete(ctx, cs); err != nil {
			t.Fatal(err)
		}
		left -= len(ls)
	}
	first := claim(t, s, "burst", 1, now)
	if len(first) != 1 || first[0].Item.Priority != 0 {
		t.Fatalf("claimed %+v, want one due item", first)
	}
	if err := s.Release(ctx, []redrive.LeaseRef{first[0].Ref()}, now); err != nil {
		t.Fatal(err)
	}
	req := redrive.ClaimRequest{Owner: "w", Pipelines: []string{"burst"}, Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute)}
	it := first[0].Item
	head, resumed, headPlan, resumedPlan, err := postgres.ClaimBuffers(ctx, s, req, it.Priority, it.OrderAt, it.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claim of 1 with %d dead entries ahead: its walk read %d buffers from the head, %d resumed", burst, head, resumed)
	// 20,000 entries fill more than 50 leaf pages of items_ready. Only the
	// walks are compared: the update of the row they pick reads what it
	// reads (index entries, the triggers' rows) wherever the walk started.
	if head-resumed < 50 {
		t.Errorf("a claim's walk from the head read %d buffers, resumed %d: want the resumed one to skip the dead entries' pages\nfrom the head:\n%s\nresumed:\n%s", head, resumed, headPlan, resumedPlan)
	}
}

// Writes of this store that make items ready ahead of where claims resume
// are claimed next, in claim order: a retry due now, an enqueue with an
// earlier order time, and a waiting item that came due.
func TestClaimResumeSeesEarlierItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	run := mustRun(t, s, "resume")
	in := make([]redrive.NewItem, 5)
	for i := range in {
		in[i].Payload = []byte(`{}`)
	}
	enqueue(t, s, run, in...)
	now := t0.Add(time.Minute)
	ls := claim(t, s, "resume", 2, now)
	if len(ls) != 2 {
		t.Fatalf("claimed %d of 5", len(ls))
	}
	// The first goes back to pending, due now; the second waits a minute.
	retry := done(ls[0], redrive.StatePending, now)
	wait := done(ls[1], redrive.StatePending, now)
	wait.NextAt = now.Add(time.Minute)
	if _, err := s.Complete(ctx, []redrive.Completion{retry, wait}); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, s, "resume", 1, now); len(got) != 1 || got[0].Item.ID != ls[0].Item.ID {
		t.Fatalf("claimed %+v after a retry due now, want item %d", got, ls[0].Item.ID)
	}
	early, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "resume", Stage: "a", Now: now,
		Items: []redrive.NewItem{{Payload: []byte(`{}`), OrderAt: t0.Add(-time.Hour)}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := claim(t, s, "resume", 1, now); len(got) != 1 || got[0].Item.ID != early[0].ID {
		t.Fatalf("claimed %+v after an enqueue ordered an hour earlier, want item %d", got, early[0].ID)
	}
	later := now.Add(2 * time.Minute)
	if got := claim(t, s, "resume", 1, later); len(got) != 1 || got[0].Item.ID != ls[1].Item.ID {
		t.Fatalf("claimed %+v once the waiting item came due, want item %d", got, ls[1].Item.ID)
	}
}

// A completion that leaves an item ready behind where claims resume (a
// failed attempt retried at once, through the full statement; a move to the
// next stage, through the success-only one) moves the point back to it,
// so the next claim takes it before the items after the point.
func TestClaimResumeSeesCompletedItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	run := mustRun(t, s, "again")
	in := make([]redrive.NewItem, 6)
	for i := range in {
		in[i].Payload = []byte(`{}`)
	}
	items := enqueue(t, s, run, in...)
	now := t0.Add(time.Minute)
	take := func(n int, want ...int64) {
		t.Helper()
		ls := claim(t, s, "again", n, now)
		var got []int64
		for _, l := range ls {
			got = append(got, l.Item.ID)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("claimed %v, want %v", got, want)
		}
	}
	first := claim(t, s, "again", 2, now)
	take(2, items[2].ID, items[3].ID) // the claims resume at the third item
	retry := done(first[0], redrive.StatePending, now)
	retry.Record.Outcome, retry.Record.Class = redrive.OutcomeRetry, "transient"
	if _, err := s.Complete(ctx, []redrive.Completion{retry}); err != nil {
		t.Fatal(err)
	}
	take(1, first[0].Item.ID)
	take(2, items[4].ID, items[5].ID) // at the fifth
	move := done(first[1], redrive.StatePending, now)
	move.Record.Outcome, move.Record.Class, move.Record.Error = redrive.OutcomeSucceeded, "", ""
	move.Stage, move.StageIndex = "b", first[1].Item.StageIndex+1
	if _, err := s.Complete(ctx, []redrive.Completion{move}); err != nil {
		t.Fatal(err)
	}
	take(1, first[1].Item.ID)
}

// An item another store (another process) makes ready ahead of where this
// store's claims resume is claimed within a few resume periods, and before
// the items ordered after it.
func TestClaimResumeSeesOtherStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.NewSchema(t)
	a := pgtest.OpenStoreAt(t, url, schema)
	b := pgtest.OpenStoreAt(t, url, schema)
	run := mustRun(t, a, "other")
	enqueue(t, a, run, redrive.NewItem{Payload: []byte(`{}`)}, redrive.NewItem{Payload: []byte(`{}`)})
	if got := claim(t, a, "other", 1, time.Now()); len(got) != 1 {
		t.Fatalf("claimed %d of 2", len(got))
	}
	urgent := enqueue(t, b, run, redrive.NewItem{Payload: []byte(`{}`), Priority: 9})
	deadline := time.Now().Add(30 * time.Second)
	for {
		now := time.Now()
		got := claim(t, a, "other", 1, now)
		if len(got) == 1 && got[0].Item.ID == urgent[0].ID {
			return
		}
		if len(got) == 1 {
			if err := a.Release(ctx, []redrive.LeaseRef{got[0].Ref()}, now); err != nil {
				t.Fatal(err)
			}
		}
		if now.After(deadline) {
			t.Fatalf("the item store b enqueued at priority 9 was not claimed by store a in 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
