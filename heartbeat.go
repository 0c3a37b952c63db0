package redrive

import "time"

func (e *engine) heartbeatLoop() {
	defer e.bg.Done()
	tick := time.NewTicker(e.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-e.bgCtx.Done():
			return
		case <-tick.C:
		}
		// Only each item's current lease is extended: an older lease of
		// the same item has ended, and sending both would leave the
		// store's answer, by item ID, ambiguous.
		e.mu.Lock()
		refs := make([]LeaseRef, 0, len(e.current))
		for _, t := range e.current {
			refs = append(refs, t.lease.Ref())
		}
		e.mu.Unlock()
		if len(refs) == 0 {
			continue
		}
		lost, err := e.store.Heartbeat(e.bgCtx, refs, e.cfg.Now().Add(e.cfg.LeaseDuration))
		if err != nil {
			e.log.Warn("redrive: heartbeat failed", "err", err)
			continue
		}
		if len(lost) == 0 {
			continue
		}
		sent := make(map[int64]int64, len(refs))
		for _, r := range refs {
			sent[r.ItemID] = r.Token
		}
		// A stale worker stops working on items that are no longer its
		// own: their new owner runs them. A lease that is no longer
		// current may instead have been completed by this process while
		// the heartbeat was on its way: such a task is completing, or
		// already gone, and the completer learns from the store whether
		// its completion applied. Only the others are losses.
		n := 0
		e.mu.Lock()
		for _, id := range lost {
			t := e.current[id]
			if t == nil || t.lease.Token != sent[id] || t.completing || t.lost {
				continue
			}
			n++
			t.lost = true
			if t.cancel != nil {
				t.cancel()
			}
		}
		e.mu.Unlock()
		e.reportLost(n, "heartbeat")
	}
}
