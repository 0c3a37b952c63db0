package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

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
