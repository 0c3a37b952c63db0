package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/redrive/redrive"
)

// RetryNow makes the waiting pending items selected by f due at now and
// ready, keeping their attempt counters; see redrive.Store.
func (s *Store) RetryNow(ctx context.Context, f redrive.ItemFilter, now time.Time) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("sqlite: retry now: %w", err)
	}
	f, err := withStates(f, []redrive.State{redrive.StatePending}, redrive.StatePending)
	if err != nil {
		return 0, fmt.Errorf("sqlite: retry now: %w", err)
	}
	if f.DueAfter.IsZero() || f.DueAfter.After(now) {
		f.DueAfter = now
	}
	where, args := itemWhere(f)
	n64 := int64(0)
	err = s.writeTx(ctx, "retry now", func(tx *sql.Tx) error {
		// ready = 1 puts the items in items_ready, which Claim walks, so
		// the next claim sees them without waiting for promotion.
		res, err := tx.ExecContext(ctx, `UPDATE items SET next_at = ?, ready = 1, updated_at = ?
			WHERE id IN (SELECT id FROM items WHERE `+where+` ORDER BY id`+limitClause(f.Limit)+`)`,
			append([]any{tnz(now), tnz(now)}, args...)...)
		if err != nil {
			return err
		}
		n64, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	return int(n64), nil
}

// MarkItems links action actionID to the items f selects.
func (s *Store) MarkItems(ctx context.Context, actionID int64, f redrive.ItemFilter) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("sqlite: mark items: %w", err)
	}
	where, args := itemWhere(f)
	var n64 int64
	err := s.writeTx(ctx, "mark items", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO action_items (item_id, action_id)
			SELECT id, ? FROM items WHERE `+where+` ORDER BY id`+limitClause(f.Limit), append([]any{actionID}, args...)...)
		if err != nil {
			return err
		}
		n64, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	return int(n64), nil
}

// UpdateAction sets the count and detail of a recorded action.
func (s *Store) UpdateAction(ctx context.Context, id int64, count int, detail string) error {
	return s.writeTx(ctx, "update action", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE audit_log SET count = ?, detail = ? WHERE id = ?`, count, detail, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("action %d: %w", id, redrive.ErrNotFound)
		}
		return nil
	})
}

// ItemActions lists the actions linked to an item, oldest first.
func (s *Store) ItemActions(ctx context.Context, itemID int64) ([]redrive.AuditAction, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT a.id, a.at, a.actor, a.kind, a.filter, a.count, a.detail
		FROM action_items m JOIN audit_log a ON a.id = m.action_id WHERE m.item_id = ? ORDER BY a.id`, itemID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: item actions: %w", err)
	}
	out, err := scanActions(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: item actions: %w", err)
	}
	return out, nil
}
