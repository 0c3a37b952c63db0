package redrive

// A lease this process holds is known by its token, not by its item: one
// process may hold an old and a new lease of the same item at once. The
// claimer takes an item's next stage as soon as a completion commits, while
// the completer still does the bookkeeping of the stage before; the rescuer
// takes over a lease of this process that expired. Keyed by item, the old
// task's bookkeeping deleted the new one's entry, the new lease was no
// longer heartbeated, expired, and was rescued as lost, again and again
// until the item was dead.

// trackLocked records t, a lease just taken, as its item's current
// lease. The store grants a new lease of an item only when
// the previous one is no longer current, so an older task of the item that
// is not writing its completion has lost its lease: its handler is
// interrupted, and trackLocked returns 1 (else 0) for the caller to report
// it. An older task that is writing its completion is left to the
// completer, which learns from the store whether it applied. e.mu is held.
func (e *engine) trackLocked(t *task) (lost int) {
	id := t.lease.Item.ID
	if t.running == nil {
		t.running = e.runningLocked(t.key())
	}
	*t.running++
	if old := e.current[id]; old != nil && old != t && !old.completing && !old.lost {
		old.lost = true
		if old.cancel != nil {
			old.cancel()
		}
		lost = 1
	}
	e.current[id] = t
	return lost
}

// untrackLocked forgets t once its completion or release was written or
// given up. e.mu is held.
func (e *engine) untrackLocked(t *task) {
	id := t.lease.Item.ID
	if e.current[id] == t {
		delete(e.current, id)
	}
	*t.running--
}

// runningLocked returns the counter of the leases of stage k that this
// process holds, making it on first use. e.mu is held.
func (e *engine) runningLocked(k StageKey) *int {
	n := e.running[k]
	if n == nil {
		n = new(int)
		e.running[k] = n
	}
	return n
}

// runningOfLocked is how many leases of stage k this process holds. e.mu
// is held.
func (e *engine) runningOfLocked(k StageKey) int {
	if n := e.running[k]; n != nil {
		return *n
	}
	return 0
}

// reportLost logs leases this process lost while their attempts were
// still its own: only real losses, never a lease that ended because this
// process completed it.
func (e *engine) reportLost(n int, how string) {
	if n > 0 {
		e.log.Warn("redrive: leases lost; their attempts were interrupted", "items", n, "noticed_by", how)
	}
}
