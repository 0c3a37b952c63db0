package readywalk

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// ready is an in-memory set of ready items in claim order.
type ready struct {
	items []item
	reads int
}

type item struct {
	prio    int
	OrderAt time.Time
	NextAt  time.Time
	ID      int64
}

func (r *ready) NextPriority(_ context.Context, below *int) (*int, error) {
	var best *int
	for _, it := range r.items {
		if (below == nil || it.prio < *below) && (best == nil || it.prio > *best) {
			p := it.prio
			best = &p
		}
	}
	return best, nil
}

func (r *ready) Page(_ context.Context, p int, afterOrder time.Time, afterID int64, n int, now time.Time) (Page, error) {
	var pg Page
	for _, it := range r.items { // in claim order
		if it.prio != p || !afterOrder.IsZero() && cmp.Or(it.OrderAt.Compare(afterOrder), cmp.Compare(it.ID, afterID)) <= 0 {
			continue
		}
		if pg.N == n {
			break
		}
		pg.N++
		if !it.NextAt.After(now) && (pg.Due.IsZero() || it.NextAt.Before(pg.Due)) {
			pg.Due = it.NextAt
		}
		pg.LastOrderAt, pg.LastID = it.OrderAt, it.ID
	}
	r.reads += pg.N
	return pg, nil
}

// Oldest agrees with the minimum over every item on seeded random sets:
// few priorities, order times spread over an hour, most items due at or
// after their order time (retries came due later), a few due before it
// (which the stores index apart and pass in as the starting point), some
// not due yet.
func TestOldestMatchesMinimum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(2 * time.Hour)
	for round := range 500 {
		r := &ready{}
		var early time.Time
		var want time.Time
		n := rng.IntN(400)
		for i := range n {
			order := t0.Add(time.Duration(rng.IntN(3600)) * time.Second)
			next := order.Add(time.Duration(rng.IntN(7200)) * time.Second)
			if rng.IntN(20) == 0 {
				next = order.Add(-time.Duration(rng.IntN(600)+1) * time.Second)
				if next.Before(now) && (early.IsZero() || next.Before(early)) {
					early = next
				}
			}
			r.items = append(r.items, item{prio: rng.IntN(3) - 1, OrderAt: order, NextAt: next, ID: int64(i + 1)})
			if !next.After(now) && (want.IsZero() || next.Before(want)) {
				want = next
			}
		}
		slices.SortFunc(r.items, func(a, b item) int {
			return cmp.Or(cmp.Compare(b.prio, a.prio), a.OrderAt.Compare(b.OrderAt), cmp.Compare(a.ID, b.ID))
		})
		got, exact, err := Oldest(context.Background(), r, now, early, 1_000_000)
		if err != nil || !exact || !got.Equal(want) {
			t.Fatalf("round %d, %d items: Oldest = %v, exact %v, %v; want %v", round, n, got, exact, err, want)
		}
	}
}

// A walk stops at the first item of each priority ordered at or after the
// oldest due time found: items enqueued together, due at their order time,
// are read one page per priority however many there are.
func TestOldestStopsEarly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &ready{}
	for i := range 10_000 {
		r.items = append(r.items, item{OrderAt: t0, NextAt: t0, ID: int64(i + 1)})
	}
	got, exact, err := Oldest(context.Background(), r, t0.Add(time.Hour), time.Time{}, 1_000_000)
	if err != nil || !exact || !got.Equal(t0) {
		t.Fatalf("Oldest = %v, exact %v, %v; want %v", got, exact, err, t0)
	}
	if r.reads > firstPage {
		t.Errorf("read %d items, want at most one page (%d)", r.reads, firstPage)
	}
}

// Past its limit the walk says so and returns the oldest it read.
func TestOldestLimit(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &ready{}
	// Retries ordered at t0 and due at 30m, then one due at 10m ordered
	// after them.
	for i := range 1000 {
		r.items = append(r.items, item{OrderAt: t0, NextAt: t0.Add(30 * time.Minute), ID: int64(i + 1)})
	}
	r.items = append(r.items, item{OrderAt: t0.Add(10 * time.Minute), NextAt: t0.Add(10 * time.Minute), ID: 1001})
	now := t0.Add(time.Hour)
	got, exact, err := Oldest(context.Background(), r, now, time.Time{}, 500)
	if err != nil || exact || !got.Equal(t0.Add(30*time.Minute)) {
		t.Fatalf("limit 500: Oldest = %v, exact %v, %v; want %v, not exact", got, exact, err, t0.Add(30*time.Minute))
	}
	got, exact, err = Oldest(context.Background(), r, now, time.Time{}, 2000)
	if err != nil || !exact || !got.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("limit 2000: Oldest = %v, exact %v, %v; want %v, exact", got, exact, err, t0.Add(10*time.Minute))
	}
}
