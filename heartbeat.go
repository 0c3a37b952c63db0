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
		e.mu.Lock()
		refs := make([]LeaseRef, 0, len(e.inflight))
		for _, t := range e.inflight {
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
		// A stale worker stops working on items that are no longer its
		// own: their new owner runs them. A lease reported lost may also
		// just have been completed meanwhile, and its item claimed again
		// by this client under a new token: only the token that was sent
		// can be lost.
		sent := make(map[int64]int64, len(refs))
		for _, r := range refs {
			sent[r.ItemID] = r.Token
		}
		n := 0
		e.mu.Lock()
		for _, id := range lost {
			if t := e.inflight[id]; t != nil && t.lease.Token == sent[id] {
				n++
				t.lost = true
				if t.cancel != nil {
					t.cancel()
				}
			}
		}
		e.mu.Unlock()
		if n > 0 {
			e.log.Warn("redrive: leases lost; their attempts were interrupted", "items", n)
		}
	}
}
