package storetest

import (
	"errors"
	"sync"
	"time"

	"github.com/redrive/redrive"
)

// testRequestKeys: a key is bound once, to the first request's hash and
// run; a later bind (of another hash, or racing) gets that binding back
// unchanged; a key of a run that does not exist is refused; the key goes
// with its run when retention deletes the run.
func testRequestKeys(h *h) {
	if _, err := h.s.RequestKey(h.ctx, "order-1"); !errors.Is(err, redrive.ErrNotFound) {
		h.Fatalf("RequestKey of an unbound key = %v; want ErrNotFound", err)
	}
	r := h.run("p", "r")
	first := redrive.RequestKey{Key: "order-1", Hash: "aaaa", RunID: r.ID, CreatedAt: at(time.Second)}
	got, err := h.s.BindRequestKey(h.ctx, first)
	if err != nil || got != first {
		h.Fatalf("first BindRequestKey = %+v, %v; want %+v", got, err, first)
	}
	other := h.run("p", "other")
	got, err = h.s.BindRequestKey(h.ctx, redrive.RequestKey{Key: "order-1", Hash: "bbbb", RunID: other.ID, CreatedAt: at(time.Minute)})
	if err != nil || got != first {
		h.Fatalf("second BindRequestKey = %+v, %v; want the first binding %+v", got, err, first)
	}
	if got, err := h.s.RequestKey(h.ctx, "order-1"); err != nil || got != first {
		h.Fatalf("RequestKey = %+v, %v; want %+v", got, err, first)
	}
	if _, err := h.s.BindRequestKey(h.ctx, redrive.RequestKey{Key: "order-2", Hash: "cccc", RunID: 424242, CreatedAt: Base}); !errors.Is(err, redrive.ErrNotFound) {
		h.Errorf("BindRequestKey to a missing run = %v; want ErrNotFound", err)
	}
	if _, err := h.s.RequestKey(h.ctx, "order-2"); !errors.Is(err, redrive.ErrNotFound) {
		h.Errorf("a refused binding was kept: %v", err)
	}

	// Racing binds of one key: all get the same binding, one of theirs.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[string]int{}
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := h.s.BindRequestKey(h.ctx, redrive.RequestKey{Key: "race", Hash: string(rune('a' + i)), RunID: r.ID, CreatedAt: Base})
			if err != nil {
				h.Errorf("racing BindRequestKey: %v", err)
				return
			}
			mu.Lock()
			seen[k.Hash]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(seen) != 1 {
		h.Errorf("racing binds saw %d bindings (%v); want one", len(seen), seen)
	}

	// Retention deletes the run, and its keys with it.
	if err := h.s.SetRunStatus(h.ctx, r.ID, redrive.RunCompleted, "", at(time.Hour)); err != nil {
		h.Fatal(err)
	}
	if _, runs, err := h.s.DeleteFinishedRuns(h.ctx, at(2*time.Hour), 0); err != nil || runs != 1 {
		h.Fatalf("DeleteFinishedRuns = %d runs, %v; want 1", runs, err)
	}
	for _, k := range []string{"order-1", "race"} {
		if _, err := h.s.RequestKey(h.ctx, k); !errors.Is(err, redrive.ErrNotFound) {
			h.Errorf("RequestKey(%q) after its run was deleted = %v; want ErrNotFound", k, err)
		}
	}
	// A deleted key is free again.
	again := redrive.RequestKey{Key: "order-1", Hash: "dddd", RunID: other.ID, CreatedAt: at(3 * time.Hour)}
	if got, err := h.s.BindRequestKey(h.ctx, again); err != nil || got != again {
		h.Errorf("BindRequestKey of a freed key = %+v, %v; want %+v", got, err, again)
	}
}
