package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

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
	t, _, err := s.oldestDue(ctx, now, oldestDueReadLimit)
	if err != nil {
		return time.Time{}, s.fail("oldest due", err)
	}
	return t, nil
}

// oldestDue is OldestDue reading at most limit ready items in claim order;
// exact reports that it did not stop at the limit.
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
		var err error
		oldest, exact, err = readywalk.Oldest(ctx, readyReader{s: s, tx: tx}, now, oldest, limit)
		return err
	})
	return oldest.UTC(), exact, err
}

// readyReader reads the ready items for readywalk in tx.
type readyReader struct {
	s  *Store
	tx pgx.Tx
}

func (r readyReader) NextPriority(ctx context.Context, below *int) (*int, error) {
	// Two statements rather than one with an optional bound, whose
	// generic plan could not seek to the bound.
	sql, args := `SELECT max(priority) FROM `+r.s.q+`.items WHERE state = 'pending' AND ready`, []any(nil)
	if below != nil {
		sql, args = sql+` AND priority < $1`, []any{*below}
	}
	var p *int32
	if err := r.tx.QueryRow(ctx, sql, args...).Scan(&p); err != nil || p == nil {
		return nil, err
	}
	v := int(*p)
	return &v, nil
}

func (r readyReader) Page(ctx context.Context, p int, afterOrder time.Time, afterID int64, n int) ([]readywalk.Item, error) {
	rows, err := r.tx.Query(ctx, `SELECT order_at, next_at, id FROM `+r.s.q+`.items
		WHERE state = 'pending' AND ready AND priority = $1 AND (order_at, id) > ($2, $3)
		ORDER BY order_at, id LIMIT $4`, p, afterOrder, afterID, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[readywalk.Item])
}
