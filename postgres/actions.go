package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// RetryNow makes the waiting pending items selected by f due at now and
// ready, keeping their attempt counters, and notifies listeners in the
// same transaction; see redrive.Store. Items claimed meanwhile are left
// alone.
func (s *Store) RetryNow(ctx context.Context, f redrive.ItemFilter, now time.Time) (int, error) {
	f, err := withStates("retry now", f, redrive.StatePending, redrive.StatePending)
	if err != nil {
		return 0, err
	}
	if f.DueAfter.IsZero() || f.DueAfter.After(now) {
		f.DueAfter = now
	}
	var a args
	nowP := a.add(now)
	// ready = true puts the items in items_ready, which Claim walks, so
	// the next claim sees them without waiting for promotion.
	sql := `UPDATE ` + s.q + `.items SET next_at = ` + nowP + `, ready = true, updated_at = ` + nowP + `
		WHERE state = 'pending' AND next_at > ` + nowP + ` AND `
	if f.Limit > 0 {
		sql += `id = ANY(ARRAY(SELECT id FROM ` + s.q + `.items WHERE ` + s.itemWhere(f, &a) + ` ORDER BY id` + limitClause(&a, f.Limit) + ` FOR UPDATE SKIP LOCKED))`
	} else {
		sql += s.itemWhere(f, &a)
	}
	var n int64
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sql, a...)
		if err != nil {
			return err
		}
		if n = tag.RowsAffected(); n > 0 {
			_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, s.channel)
		}
		return err
	})
	if err != nil {
		return 0, s.fail("retry now", err)
	}
	// Items made ready anywhere in claim order (claimfrom.go).
	s.resume.forget()
	return int(n), nil
}

// MarkItems links action actionID to the items f selects.
func (s *Store) MarkItems(ctx context.Context, actionID int64, f redrive.ItemFilter) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("postgres: mark items: %w", err)
	}
	var a args
	act := a.add(actionID)
	sel := `SELECT id, ` + act + `::bigint FROM ` + s.q + `.items WHERE ` + s.itemWhere(f, &a)
	if f.Limit > 0 {
		sel += ` ORDER BY id` + limitClause(&a, f.Limit)
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO `+s.q+`.action_items (item_id, action_id) `+sel+`
		ON CONFLICT DO NOTHING`, a...)
	if err != nil {
		return 0, s.fail("mark items", err)
	}
	return int(tag.RowsAffected()), nil
}

// UpdateAction sets the count and detail of a recorded action.
func (s *Store) UpdateAction(ctx context.Context, id int64, count int, detail string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.q+`.audit_log SET count = $1, detail = $2 WHERE id = $3`, count, detail, id)
	if err != nil {
		return s.fail("update action", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: update action %d: %w", id, redrive.ErrNotFound)
	}
	return nil
}

// ItemActions lists the actions linked to an item, oldest first.
func (s *Store) ItemActions(ctx context.Context, itemID int64) ([]redrive.AuditAction, error) {
	rows, err := s.pool.Query(ctx, `SELECT a.id, a.at, a.actor, a.kind, a.filter, a.count, a.detail
		FROM `+s.q+`.action_items m JOIN `+s.q+`.audit_log a ON a.id = m.action_id
		WHERE m.item_id = $1 ORDER BY a.id`, itemID)
	if err != nil {
		return nil, s.fail("item actions", err)
	}
	out, err := pgx.CollectRows(rows, scanAction)
	if err != nil {
		return nil, s.fail("item actions", err)
	}
	return out, nil
}
