package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// oldestDueReadLimit is how many ready items OldestDue reads at most in
// claim order (see oldestDue).
const oldestDueReadLimit = 100_000

// OldestDue returns the smallest NextAt of the pending items due at now, or
// the zero time when none is due.
//
// Waiting items are read through items_waiting, and ready items whose due
// time is before their order time through items_ready_early: one index
// probe each. The other ready items are read in claim order, priority by
// priority, only as far as they can hold an older due time (migration
// 0017): usually one item per priority. Should more than 100,000 ready
// items have to be read, OldestDue returns the oldest due time among
// them, which is no older than the true one.
func (s *Store) OldestDue(ctx context.Context, now time.Time) (time.Time, error) {
	t, _, err := s.oldestDue(ctx, now, oldestDueReadLimit)
	if err != nil {
		return time.Time{}, s.fail("oldest due", err)
	}
	return t, nil
}

// oldestDue is OldestDue reading at most limit ready items in claim order;
// exact reports that it did not stop at the limit.
//
// A ready item is due no earlier than its order time unless it is in
// items_ready_early. Within a priority, items_ready is in order time
// order, so once an item's order time is not before the oldest due time
// found so far, no later item of that priority is due before it.
func (s *Store) oldestDue(ctx context.Context, now time.Time, limit int) (oldest time.Time, exact bool, err error) {
	// One snapshot, so that an item promoted or claimed during the reads
	// is seen in one place only.
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// Walks of items_ready in index order, as Claim's (see claimOrdered).
		if _, err := tx.Exec(ctx, planSettings); err != nil {
			return err
		}
		var best *time.Time
		if err := tx.QueryRow(ctx, `SELECT least(
			(SELECT min(next_at) FROM `+s.q+`.items WHERE state = 'pending' AND NOT ready AND next_at <= $1),
			(SELECT min(next_at) FROM `+s.q+`.items WHERE state = 'pending' AND ready AND next_at < order_at AND next_at <= $1))`,
			now).Scan(&best); err != nil {
			return err
		}
		if best != nil {
			oldest = *best
		}
		read := 0
		var prio *int32
		for {
			// The next priority down, by a probe of items_ready.
			// Two statements rather than one with an optional bound, whose
			// generic plan could not seek to the bound.
			var p *int32
			sql, args := `SELECT max(priority) FROM `+s.q+`.items WHERE state = 'pending' AND ready`, []any(nil)
			if prio != nil {
				sql, args = sql+` AND priority < $1`, []any{*prio}
			}
			if err := tx.QueryRow(ctx, sql, args...).Scan(&p); err != nil {
				return err
			}
			if p == nil {
				exact = true
				return nil
			}
			// A probe counts as a read, so that many priorities of few
			// items each stay bounded too.
			prio = p
			read++
			done, err := s.oldestDueAt(ctx, tx, *p, now, &oldest, &read, limit)
			if err != nil || !done {
				return err
			}
		}
	})
	return oldest.UTC(), exact, err
}

// oldestDueAt walks the ready items of priority p in claim order, in pages
// that grow from 64 to 4,096 items, lowering *oldest to the due time of any
// item due at now before it, until an item's order time is not before
// *oldest or the items end (done), or *read reaches limit (not done).
func (s *Store) oldestDueAt(ctx context.Context, tx pgx.Tx, p int32, now time.Time, oldest *time.Time, read *int, limit int) (done bool, err error) {
	page := 64
	var afterOrder time.Time
	afterID := int64(-1)
	for {
		n := min(page, limit-*read)
		if n <= 0 {
			return false, nil
		}
		rows, err := tx.Query(ctx, `SELECT order_at, id, next_at FROM `+s.q+`.items
			WHERE state = 'pending' AND ready AND priority = $1 AND (order_at, id) > ($2, $3)
			ORDER BY order_at, id LIMIT $4`, p, afterOrder, afterID, n)
		if err != nil {
			return false, err
		}
		got, stop := 0, false
		var order, next time.Time
		var id int64
		_, err = pgx.ForEachRow(rows, []any{&order, &id, &next}, func() error {
			got++
			if stop {
				return nil
			}
			if !oldest.IsZero() && !order.Before(*oldest) {
				stop = true
				return nil
			}
			if !next.After(now) && (oldest.IsZero() || next.Before(*oldest)) {
				*oldest = next
			}
			afterOrder, afterID = order, id
			*read++
			return nil
		})
		if err != nil {
			return false, err
		}
		if stop || got < n {
			return true, nil
		}
		page = min(4*page, 4096)
	}
}
