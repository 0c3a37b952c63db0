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
		// Walks of items_ready in index order, as Claim's (see
		// claimOrdered), and no JIT: a plan these settings price high
		// would otherwise be compiled, for far longer than it runs.
		if _, err := tx.Exec(ctx, planSettings+`, set_config('jit', 'off', true)`); err != nil {
			return err
		}
		var best *time.Time
		if err := tx.QueryRow(ctx, `SELECT least(
			(SELECT min(next_at) FROM `+s.q+`.items WHERE state = 'pending' AND lease_expires_at IS NULL AND NOT ready AND next_at <= $1),
			(SELECT min(next_at) FROM `+s.q+`.items WHERE state = 'pending' AND ready AND lease_expires_at IS NULL AND next_at < order_at AND next_at <= $1))`,
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
	sql, args := `SELECT max(priority) FROM `+r.s.q+`.items WHERE state = 'pending' AND ready AND lease_expires_at IS NULL`, []any(nil)
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

func (r readyReader) Page(ctx context.Context, p int, afterOrder time.Time, afterID int64, n int, now time.Time) (readywalk.Page, error) {
	// The page is summed up in the server: one row back, not n. The first
	// page has no bound, rather than an optional one that a generic plan
	// could not seek to.
	bound, args := ``, []any{p, n, now}
	if !afterOrder.IsZero() {
		bound, args = ` AND (order_at, id) > ($4, $5)`, append(args, afterOrder, afterID)
	}
	var pg readywalk.Page
	var due, lastOrder *time.Time
	var lastID *int64
	// The last item is found with max rather than a sort, which the
	// settings of the walk (see oldestDue) would price so high that the
	// statement got compiled with JIT: 220 ms instead of 1.
	err := r.tx.QueryRow(ctx, `WITH page AS MATERIALIZED (SELECT order_at, next_at, id FROM `+r.s.q+`.items
			WHERE state = 'pending' AND ready AND lease_expires_at IS NULL AND priority = $1`+bound+`
			ORDER BY order_at, id LIMIT $2)
		SELECT count(*), min(next_at) FILTER (WHERE next_at <= $3), max(order_at),
			(SELECT max(id) FROM page l WHERE l.order_at = (SELECT max(order_at) FROM page))
		FROM page`, args...).Scan(&pg.N, &due, &lastOrder, &lastID)
	if err != nil {
		return pg, err
	}
	if due != nil {
		pg.Due = *due
	}
	if lastOrder != nil && lastID != nil {
		pg.LastOrderAt, pg.LastID = *lastOrder, *lastID
	}
	return pg, nil
}
