// Package readywalk finds the oldest due time among a store's ready items
// by walking them in claim order only as far as one of them can be due
// longer than the oldest found.
//
// Claim order is priority (higher first), then order time, then ID. A
// ready item is due no earlier than its order time, except one whose order
// time lies ahead of its due time (an OrderAt in the future), which the
// stores keep in an index of their own and pass in as the starting point.
// So within a priority, once an item's order time is not before the oldest
// due time found, no later item of that priority is due before it, and the
// walk goes on with the next priority.
package readywalk

import (
	"context"
	"time"
)

// Page sums up a page of ready items of one priority in claim order.
type Page struct {
	// N is how many items the page holds.
	N int
	// Due is the smallest due time among its items due at the walk's
	// now; the zero time when none is.
	Due time.Time
	// LastOrderAt and LastID are the claim order key of its last item.
	LastOrderAt time.Time
	LastID      int64
}

// Reader reads a store's ready items, all in one snapshot.
type Reader interface {
	// NextPriority returns the highest priority of the ready items below
	// below (of all of them when below is nil), or nil when there is none.
	NextPriority(ctx context.Context, below *int) (*int, error)
	// Page sums up the next up to n ready items of priority p that come
	// after (afterOrder, afterID) in claim order (after all of them when
	// afterOrder is the zero time), with due times counted up to now.
	Page(ctx context.Context, p int, afterOrder time.Time, afterID int64, n int, now time.Time) (Page, error)
}

// Pages grow from firstPage to lastPage items.
const (
	firstPage = 64
	lastPage  = 4096
)

// Oldest lowers oldest (the zero time: none yet) to the due time of any
// ready item due at now before it, reading at most limit items and
// priorities. exact reports that it did not stop at the limit; when it
// did, the result is the oldest due time among the items read, so no older
// than the true one.
//
// A page is read whole: its items after the first one ordered at or after
// the oldest due time cannot lower it, so its smallest due time is the
// walk's; and the walk of a priority ends with the first page whose last
// item is ordered at or after the oldest due time, or that comes back
// short.
func Oldest(ctx context.Context, r Reader, now, oldest time.Time, limit int) (_ time.Time, exact bool, err error) {
	read := 0
	var below *int
	for {
		p, err := r.NextPriority(ctx, below)
		if err != nil {
			return oldest, false, err
		}
		if p == nil {
			return oldest, true, nil
		}
		// A probe counts as a read, so that many priorities of few items
		// each stay bounded too.
		below = p
		read++
		page := firstPage
		afterOrder, afterID := time.Time{}, int64(0)
		for {
			n := min(page, limit-read)
			if n <= 0 {
				return oldest, false, nil
			}
			pg, err := r.Page(ctx, *p, afterOrder, afterID, n, now)
			if err != nil {
				return oldest, false, err
			}
			read += pg.N
			if !pg.Due.IsZero() && (oldest.IsZero() || pg.Due.Before(oldest)) {
				oldest = pg.Due
			}
			if pg.N < n || !oldest.IsZero() && !pg.LastOrderAt.Before(oldest) {
				break
			}
			afterOrder, afterID = pg.LastOrderAt, pg.LastID
			page = min(4*page, lastPage)
		}
	}
}
