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

func (r readyReader) Page(ctx context.Context, p int, afterOrder time.Time, afterID int64, n int) ([]readywalk.Item, error) {
	after := int64(math.MinInt64)
	if !afterOrder.IsZero() {
		after = afterOrder.UnixNano()
	}
	rows, err := r.tx.QueryContext(ctx, `SELECT order_at, next_at, id FROM items INDEXED BY items_ready
		WHERE state = 'pending' AND ready = 1 AND priority = ?1 AND (order_at, id) > (?2, ?3)
		ORDER BY order_at, id LIMIT ?4`, p, after, afterID, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []readywalk.Item
	for rows.Next() {
		var order, next int64
		var it readywalk.Item
		if err := rows.Scan(&order, &next, &it.ID); err != nil {
			return nil, err
		}
		it.OrderAt, it.NextAt = time.Unix(0, order).UTC(), time.Unix(0, next).UTC()
		out = append(out, it)
	}
	return out, rows.Err()
}
