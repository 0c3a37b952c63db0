package storetest

import (
	"errors"
	"slices"
	"time"

	"github.com/redrive/redrive"
)

// testPurgeKeepsCounts: a purge does not rewrite a run's history: the
// purged items stay in its total, as Counts.Purged, and its success rate
// is unchanged.
func testPurgeKeepsCounts(h *h) {
	r, _ := dlqFixture(h)
	before := h.getRun(r.ID)
	n, err := h.s.Purge(h.ctx, redrive.ItemFilter{RunID: r.ID, Class: "final"})
	if err != nil || n != 2 {
		h.Fatalf("Purge(final) = %d, %v; want 2", n, err)
	}
	after := h.getRun(r.ID)
	want := before.Counts
	want.Dead -= 2
	want.Purged += 2
	if after.Counts != want || !after.Counts.AddsUp() {
		h.Errorf("counts after purging 2 = %+v, want %+v", after.Counts, want)
	}
	if after.SuccessRate() != before.SuccessRate() {
		h.Errorf("success rate changed by a purge: %v, was %v", after.SuccessRate(), before.SuccessRate())
	}
	if _, err := h.s.Purge(h.ctx, redrive.ItemFilter{RunID: r.ID, States: []redrive.State{redrive.StateDead, redrive.StateCanceled}}); err != nil {
		h.Fatal(err)
	}
	c := h.getRun(r.ID).Counts
	if c.Total != before.Counts.Total || c.Purged != 5 || c.Dead != 0 || c.Canceled != 0 || !c.AddsUp() {
		h.Errorf("counts after purging every dead and canceled item = %+v", c)
	}
	runs, err := h.s.ListRuns(h.ctx, redrive.RunFilter{})
	if err != nil {
		h.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Counts != c {
		h.Errorf("ListRuns counts = %+v, GetRun %+v", runs, c)
	}
}

// testErrorContainsIgnoresCase: error search ignores case.
func testErrorContainsIgnoresCase(h *h) {
	_, m := dlqFixture(h)
	for _, q := range []string{"DEADLINE", "Context Deadline", "deadline"} {
		h.equalIDs("ErrorContains "+q, itemIDs(h.list(redrive.ItemFilter{ErrorContains: q})), []int64{m["timeout"], m["stageb"]})
	}
	h.equalIDs("ErrorContains bad request", itemIDs(h.list(redrive.ItemFilter{ErrorContains: "bad request"})), []int64{m["badreq"]})
}

// testRunSource: a run records where its items came from.
func testRunSource(h *h) {
	opts := redrive.RunOptions{Name: "jan", Source: "jan/items.jsonl", SourceHash: "sha256:abc"}
	r, created, err := h.s.CreateRun(h.ctx, "p", opts, Base)
	if err != nil || !created {
		h.Fatalf("CreateRun = %v, %v", created, err)
	}
	got := h.getRun(r.ID)
	if got.Options.Source != opts.Source || got.Options.SourceHash != opts.SourceHash {
		h.Errorf("run options = %+v, want source %q and hash %q", got.Options, opts.Source, opts.SourceHash)
	}
	again, created, err := h.s.CreateRun(h.ctx, "p", redrive.RunOptions{Name: "jan", Source: "feb/items.jsonl", SourceHash: "sha256:def"}, Base)
	if err != nil || created || again.ID != r.ID {
		h.Fatalf("CreateRun of an existing name = %+v, %v, %v", again, created, err)
	}
	if again.Options.SourceHash != opts.SourceHash {
		h.Errorf("the existing run's source hash = %q, want the recorded %q", again.Options.SourceHash, opts.SourceHash)
	}
}

// testWorkers: the workers table.
func testWorkers(h *h) {
	if ws, err := h.s.ListWorkers(h.ctx); err != nil || len(ws) != 0 {
		h.Fatalf("ListWorkers of a new store = %v, %v", ws, err)
	}
	a := redrive.Worker{Owner: "host-a:1:x", Host: "host-a", PID: 1, Pipelines: []string{"p", "q"},
		StartedAt: Base, LastSeen: at(time.Second), ExpiresAt: at(31 * time.Second)}
	b := redrive.Worker{Owner: "host-b:2:y", Host: "host-b", PID: 2, Pipelines: []string{"q"},
		StartedAt: Base, LastSeen: Base, ExpiresAt: at(30 * time.Second)}
	for _, w := range []redrive.Worker{b, a} {
		if err := h.s.UpsertWorker(h.ctx, w); err != nil {
			h.Fatal(err)
		}
	}
	a.LastSeen, a.ExpiresAt = at(11*time.Second), at(41*time.Second)
	if err := h.s.UpsertWorker(h.ctx, a); err != nil {
		h.Fatal(err)
	}
	ws, err := h.s.ListWorkers(h.ctx)
	if err != nil {
		h.Fatal(err)
	}
	if len(ws) != 2 {
		h.Fatalf("ListWorkers = %+v, want 2 rows", ws)
	}
	for i, want := range []redrive.Worker{a, b} {
		got := ws[i]
		if got.Owner != want.Owner || got.Host != want.Host || got.PID != want.PID || !slices.Equal(got.Pipelines, want.Pipelines) {
			h.Errorf("worker %d = %+v, want %+v", i, got, want)
		}
		h.equalTime("StartedAt", got.StartedAt, want.StartedAt)
		h.equalTime("LastSeen", got.LastSeen, want.LastSeen)
		h.equalTime("ExpiresAt", got.ExpiresAt, want.ExpiresAt)
	}
	live, err := redrive.LiveWorkers(h.ctx, h.s, "p", at(35*time.Second))
	if err != nil || len(live) != 1 || live[0].Owner != a.Owner {
		h.Errorf("LiveWorkers(p) = %+v, %v; want %s", live, err, a.Owner)
	}
	if live, _ := redrive.LiveWorkers(h.ctx, h.s, "q", at(45*time.Second)); len(live) != 0 {
		h.Errorf("stale workers taken as live: %+v", live)
	}
	if err := h.s.RemoveWorker(h.ctx, a.Owner); err != nil {
		h.Fatal(err)
	}
	if err := h.s.RemoveWorker(h.ctx, "nobody"); err != nil {
		h.Errorf("RemoveWorker of a missing owner: %v", err)
	}
	if ws, err := h.s.ListWorkers(h.ctx); err != nil || len(ws) != 1 || ws[0].Owner != b.Owner {
		h.Errorf("ListWorkers after RemoveWorker = %+v, %v", ws, err)
	}
}

// stagesFixture moves one item through stages a, b and c (a's output
// "to-b", b's "to-c") and kills it at c; another dies at a.
func stagesFixture(h *h) (r redrive.Run, atC, atA int64) {
	r = h.run("p", "")
	got := h.enqueue(r, "a", Base, redrive.NewItem{Key: "c", Payload: []byte("input")}, redrive.NewItem{Key: "a", Payload: []byte("input-a")})
	atC, atA = got[0], got[1]
	now := Base
	for _, next := range []struct{ stage, payload string }{{"b", "to-b"}, {"c", "to-c"}} {
		var cs []redrive.Completion
		for _, l := range h.claimAll("p", now) {
			if l.Item.ID == atA {
				cs = append(cs, kill(l, now, "final", "bad input"))
				continue
			}
			cs = append(cs, advance(l, now, next.stage, []byte(next.payload)))
		}
		h.complete(cs...)
		now = now.Add(time.Minute)
	}
	ls := h.claimAll("p", now)
	if len(ls) != 1 || ls[0].Item.Stage != "c" {
		h.Fatalf("fixture: claimed %+v, want the item at stage c", ls)
	}
	h.complete(kill(ls[0], now, "final", "bad model output"))
	return r, atC, atA
}

// testRedriveFromStage: RedriveFrom restarts items at an earlier stage
// with the input that stage had.
func testRedriveFromStage(h *h) {
	r, atC, atA := stagesFixture(h)
	now := at(time.Hour)
	// An item that never reached the stage: an error, and nothing changes.
	_, err := h.s.RedriveFrom(h.ctx, redrive.RedriveFromRequest{Filter: redrive.ItemFilter{RunID: r.ID}, Stage: "b", Now: now})
	if !errors.Is(err, redrive.ErrBadFilter) {
		h.Errorf("RedriveFrom(b) over an item dead at a: err = %v, want one wrapping ErrBadFilter", err)
	}
	if it := h.item(atC); it.State != redrive.StateDead || it.Stage != "c" {
		h.Errorf("a failed RedriveFrom changed an item: %+v", it)
	}
	f := redrive.ItemFilter{RunID: r.ID, Stage: "c"}
	n, err := h.s.RedriveFrom(h.ctx, redrive.RedriveFromRequest{Filter: f, Stage: "b", Now: now, DryRun: true})
	if err != nil || n != 1 {
		h.Fatalf("RedriveFrom dry run = %d, %v; want 1", n, err)
	}
	if it := h.item(atC); it.State != redrive.StateDead {
		h.Errorf("a dry run changed the item: %+v", it)
	}
	n, err = h.s.RedriveFrom(h.ctx, redrive.RedriveFromRequest{Filter: f, Stage: "b", Now: now})
	if err != nil || n != 1 {
		h.Fatalf("RedriveFrom(b) = %d, %v; want 1", n, err)
	}
	it := h.item(atC)
	if it.State != redrive.StatePending || it.Stage != "b" || it.StageIndex != 1 || string(it.Payload) != "to-b" ||
		it.Attempt != 0 || it.Reason != nil {
		h.Errorf("item redriven from b = %+v, want pending at b (#1) with payload to-b", it)
	}
	h.equalTime("NextAt", it.NextAt, now)
	if run := h.getRun(r.ID); run.Status != redrive.RunRunning || run.Counts.Pending != 1 || !run.Counts.AddsUp() {
		h.Errorf("run after RedriveFrom = %+v", run)
	}
	// b makes new output; a second death at c and a redrive from a start
	// over from the original input; the new b output was kept.
	l := h.claimAll("p", now)[0]
	h.complete(advance(l, now, "c", []byte("to-c again")))
	l = h.claimAll("p", now)[0]
	h.complete(kill(l, now, "final", "bad model output"))
	n, err = h.s.RedriveFrom(h.ctx, redrive.RedriveFromRequest{Filter: redrive.ItemFilter{RunID: r.ID}, Stage: "a", Now: now, Interval: time.Second})
	if err != nil || n != 2 {
		h.Fatalf("RedriveFrom(a) = %d, %v; want 2", n, err)
	}
	if it := h.item(atC); it.Stage != "a" || it.StageIndex != 0 || string(it.Payload) != "input" {
		h.Errorf("item redriven from a = %+v, want stage a with its input", it)
	}
	if it := h.item(atA); it.Stage != "a" || string(it.Payload) != "input-a" || it.State != redrive.StatePending {
		h.Errorf("item dead at a, redriven from a = %+v", it)
	}
	h.equalTime("second item's NextAt", h.item(atA).NextAt, now.Add(time.Second))
	// Its attempts are kept, and the item goes on from a as usual.
	if n := len(h.attempts(atC)); n != 5 {
		h.Errorf("attempts after RedriveFrom = %d, want 5", n)
	}
	for _, l := range h.claimAll("p", now.Add(time.Minute)) {
		if l.Item.ID == atC {
			h.complete(advance(l, now, "b", []byte("to-b 2")))
		}
	}
	l = h.claimAll("p", now.Add(time.Minute))[0]
	h.complete(kill(l, now, "final", "b failed"))
	if _, err := h.s.RedriveFrom(h.ctx, redrive.RedriveFromRequest{Filter: redrive.ItemFilter{RunID: r.ID, Stage: "b"}, Stage: "b", Now: now}); err != nil {
		h.Fatal(err)
	}
	if it := h.item(atC); string(it.Payload) != "to-b 2" {
		h.Errorf("the stored input of b was not replaced: %q", it.Payload)
	}
	// Purging an item deletes its stored inputs with it (nothing to see
	// through the API but that the purge works).
	if _, err := h.s.Purge(h.ctx, redrive.ItemFilter{RunID: r.ID, States: []redrive.State{redrive.StateDead}}); err != nil {
		h.Fatal(err)
	}
}
