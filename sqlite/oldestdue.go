package sqlite

import (
	"context"
	"database/sql"
	"math"
	"time"

	"github.com/redrive/redrive/internal/readywalk"
)

// oldestDueReadLimit is how many ready items OldestDue reads at most in
// claim order (see readywalk).
const oldestDueReadLimit = 100_000

// OldestDue returns the smallest NextAt of the pending items due at now, or
// the zero time when none is due.
//
// Waiting items are read through items_waiting, and ready items whose due
// time is before their order time through items_ready_early: one index
// probe each. The other ready items are read through items_ready in claim
// order, priority by priority, only as far as they can hold an older due
// time (migration 0017): usually one item per priority. Should more than
// 100,000 ready items have to be read, OldestDue returns the oldest due
// time among them, which is no older than the true one.
func (s *Store) OldestDue(ctx context.Context, now time.Time) (time.Time, error) {
	var oldest time.Time
	// One read transaction: one snapshot of the items.
	err := s.readTx(ctx, "oldest due", func(tx *sql.Tx) error {
		var n sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MIN(next_at) FROM (
			SELECT MIN(next_at) AS next_at FROM items INDEXED BY items_waiting WHERE state = 'pending' AND ready = 0 AND next_at <= ?1
			UNION ALL
			SELECT MIN(next_at) FROM items INDEXED BY items_ready_early
				WHERE state = 'pending' AND ready = 1 AND next_at < order_at AND next_at <= ?1)`,
			tnz(now)).Scan(&n); err != nil {
			return err
		}
		var err error
		oldest, _, err = readywalk.Oldest(ctx, readyReader{tx}, now, nt(n), oldestDueReadLimit)
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	return oldest, nil
}

// readyReader reads the ready items for readywalk in a read transaction.
type readyReader struct{ tx *sql.Tx }

func (r readyReader) NextPriority(ctx context.Context, below *int) (*int, error) {
	q, args := `SELECT MAX(priority) FROM items INDEXED BY items_ready WHERE state = 'pending' AND ready = 1`, []any(nil)
	if below != nil {
		q, args = q+` AND priority < ?`, []any{*below}
	}
	var p sql.NullInt64
	if err := r.tx.QueryRowContext(ctx, q, args...).Scan(&p); err != nil || !p.Valid {
		return nil, err
	}
	v := int(p.Int64)
	return &v, nil
}

func (r readyReader) Page(ctx context.Context, p int, afterOrder time.Time, afterID int64, n int, now time.Time) (readywalk.Page, error) {
	after := int64(math.MinInt64)
	if !afterOrder.IsZero() {
		after = afterOrder.UnixNano()
	}
	// The page is summed up in SQLite: one row back, not n.
	var pg readywalk.Page
	var due, lastOrder, lastID sql.NullInt64
	err := r.tx.QueryRowContext(ctx, `WITH page AS MATERIALIZED (SELECT order_at, next_at, id FROM items INDEXED BY items_ready
			WHERE state = 'pending' AND ready = 1 AND priority = ?1 AND (order_at, id) > (?2, ?3)
			ORDER BY order_at, id LIMIT ?4)
		SELECT COUNT(*), MIN(CASE WHEN next_at <= ?5 THEN next_at END), MAX(order_at),
			(SELECT MAX(id) FROM page l WHERE l.order_at = (SELECT MAX(order_at) FROM page))
		FROM page`,
		p, after, afterID, n, tnz(now)).Scan(&pg.N, &due, &lastOrder, &lastID)
	if err != nil {
		return pg, err
	}
	pg.Due = nt(due)
	if lastOrder.Valid {
		pg.LastOrderAt, pg.LastID = time.Unix(0, lastOrder.Int64).UTC(), lastID.Int64
	}
	return pg, nil
}
