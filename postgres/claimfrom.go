package postgres

import (
	"strings"
	"sync"
	"time"

	"github.com/redrive/redrive"
)

// A claim walks items_ready in claim order (priority DESC, order_at, id)
// from its head. Every item claimed leaves the entry of its ready version
// at that head, dead, until a vacuum removes it; PostgreSQL marks such an
// entry dead on the first walk that meets it, but later walks still step
// over it. After a burst (900,000 items claimed and failed onto a backoff)
// every claim stepped over 900,000 dead entries, about 4,500 index pages:
// 3.0 - 4.6 times the time of a claim on a table holding only due items
// (docs/BENCHMARKS.md, "Claims with a waiting backlog").
//
// So claims resume where the last claim of the same shape began: a resume
// point is the claim-order key of the first item that claim leased, and
// the next claim walks items_ready from there (an index range start, so
// the entries before it are not read at all). Every write of this store
// that makes items ready ahead of a resume point moves the point back to
// them once it has committed (Enqueue, Complete, Release, and the
// promotion inside a claim); writes the store cannot place (operator
// actions, redrives, reschedules) forget every point. A claim that is
// running while such a write commits keeps the write's key in its ticket
// and resumes no later than it. Writes of other processes are not seen:
// a claim walks items_ready from its head again when its shape's point is
// older than resumeFor, so an item another process made ready ahead of
// this process's point is claimed, in order, within resumeFor; and so is
// an item whose claim by another claimer of this process rolled back, and
// a ready item that was not due yet when a claim passed it (written with
// a clock ahead of the claimer's).

// resumeFor is how long a resume point serves before a claim of its shape
// walks items_ready from the head again.
const resumeFor = time.Second

// maxResumePoints bounds the resume points a store keeps (one per claim
// shape: pipelines, Only, Exclude); past it they are all forgotten.
const maxResumePoints = 256

// readyKey is an item's place in claim order.
type readyKey struct {
	priority int
	orderAt  time.Time
	id       int64
}

// before reports whether k comes before o in claim order.
func (k readyKey) before(o readyKey) bool {
	if k.priority != o.priority {
		return k.priority > o.priority
	}
	if c := k.orderAt.Compare(o.orderAt); c != 0 {
		return c < 0
	}
	return k.id < o.id
}

// firstKey returns the earlier of k and o in claim order; a nil one is
// absent.
func firstKey(k, o *readyKey) *readyKey {
	if k == nil || (o != nil && o.before(*k)) {
		return o
	}
	return k
}

// resumePoint is where claims of one shape resume.
type resumePoint struct {
	key    readyKey
	walked time.Time // when a claim of the shape last walked from the head
}

// claimTicket is one claim in flight.
type claimTicket struct {
	shape   string
	from    *readyKey // nil: the claim walks from the head
	started time.Time
	missed  *readyKey // the first key made ready while the claim ran
	forget  bool      // a write the store cannot place committed meanwhile
}

// resumePoints are a store's resume points and the claims in flight.
type resumePoints struct {
	mu     sync.Mutex
	points map[string]resumePoint
	flight map[*claimTicket]struct{}
}

// claimShape is the key of req's resume point: claims that filter items
// alike.
func claimShape(req redrive.ClaimRequest) string {
	var b strings.Builder
	for _, p := range req.Pipelines {
		b.WriteString(p)
		b.WriteByte(0)
	}
	for _, ks := range [][]redrive.StageKey{req.Only, req.Exclude} {
		b.WriteByte(1)
		for _, k := range ks {
			b.WriteString(k.Pipeline)
			b.WriteByte(0)
			b.WriteString(k.Stage)
			b.WriteByte(0)
		}
	}
	return b.String()
}

// begin registers a claim of shape and says where it starts.
func (r *resumePoints) begin(shape string) *claimTicket {
	now := time.Now()
	t := &claimTicket{shape: shape, started: now}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.points[shape]; ok && now.Sub(p.walked) < resumeFor {
		k := p.key
		t.from = &k
	}
	if r.flight == nil {
		r.flight = make(map[*claimTicket]struct{})
	}
	r.flight[t] = struct{}{}
	return t
}

// end unregisters t, whose claim leased first (nil: nothing, or it
// failed) and made ready the items from promoted on (nil: none), both
// committed, and sets t's shape's resume point.
func (r *resumePoints) end(t *claimTicket, first, promoted *readyKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.flight, t)
	if promoted != nil {
		r.lowerLocked(*promoted)
	}
	if t.forget {
		return
	}
	key := firstKey(first, t.missed)
	p, ok := r.points[t.shape]
	switch {
	case key == nil && t.from == nil:
		// A walk from the head that found nothing: the next starts there
		// too.
		delete(r.points, t.shape)
	case key == nil:
	case t.from == nil:
		if !ok && len(r.points) >= maxResumePoints {
			clear(r.points)
		}
		if r.points == nil {
			r.points = make(map[string]resumePoint)
		}
		r.points[t.shape] = resumePoint{key: *key, walked: t.started}
	case ok:
		p.key = *key
		r.points[t.shape] = p
	}
}

// lower moves every resume point after k back to k, and has every claim
// in flight resume no later than k: an item at k became ready and its
// write committed.
func (r *resumePoints) lower(k *readyKey) {
	if k == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lowerLocked(*k)
}

func (r *resumePoints) lowerLocked(k readyKey) {
	for shape, p := range r.points {
		if k.before(p.key) {
			p.key = k
			r.points[shape] = p
		}
	}
	for t := range r.flight {
		t.missed = firstKey(t.missed, &k)
	}
}

// forget drops every resume point, after a write that made items ready
// whose keys the store does not know: the next claims walk from the head.
func (r *resumePoints) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.points)
	for t := range r.flight {
		t.forget = true
	}
}
