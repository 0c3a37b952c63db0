package redrive

import (
	"slices"
	"sync"
	"time"
)

// pauseRefresh is how long an engine trusts its list of paused stages: a
// pause or resume from any process takes effect within it, at the cost of
// one small query per interval, not one per claim.
const pauseRefresh = time.Second

// pausedStages caches the store's paused stages for an engine.
type pausedStages struct {
	mu      sync.Mutex
	keys    []StageKey
	fetched time.Time
}

// withoutPaused returns req with the paused stages excluded, and false when
// nothing is left to claim (every stage of req.Only is paused). When the
// store cannot be read, the last known list is used and the error logged:
// a brief store hiccup neither stops nor unpauses claiming.
func (e *engine) withoutPaused(req ClaimRequest, now time.Time) (ClaimRequest, bool) {
	p := &e.paused
	p.mu.Lock()
	if p.fetched.IsZero() || now.Sub(p.fetched) >= pauseRefresh || now.Before(p.fetched) {
		list, err := e.store.PausedStages(e.claimCtx)
		if err != nil {
			if e.claimCtx.Err() == nil {
				e.log.Warn("redrive: list paused stages", "error", err)
			}
		} else {
			p.keys = p.keys[:0]
			for _, s := range list {
				p.keys = append(p.keys, StageKey{Pipeline: s.Pipeline, Stage: s.Stage})
			}
			p.fetched = now
		}
	}
	keys := slices.Clone(p.keys)
	p.mu.Unlock()
	if len(keys) == 0 {
		return req, true
	}
	if len(req.Only) > 0 {
		req.Only = slices.DeleteFunc(slices.Clone(req.Only), func(k StageKey) bool { return slices.Contains(keys, k) })
		if len(req.Only) == 0 {
			return req, false
		}
	}
	req.Exclude = append(slices.Clone(req.Exclude), keys...)
	return req, true
}
