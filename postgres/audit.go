package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// RecordAction appends a to the audit log.
func (s *Store) RecordAction(ctx context.Context, a redrive.AuditAction) (int64, error) {
	if a.Actor == "" || a.Kind == "" {
		return 0, errors.New("postgres: record action: actor and kind are required")
	}
	var id int64
	err := s.pool.QueryRow(ctx, `INSERT INTO `+s.q+`.audit_log (at, actor, kind, filter, count, detail)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`, a.At, a.Actor, a.Kind, a.Filter, a.Count, a.Detail).Scan(&id)
	if err != nil {
		return 0, s.fail("record action", err)
	}
	return id, nil
}

// ListActions lists the audit log, newest first.
func (s *Store) ListActions(ctx context.Context, f redrive.AuditFilter) ([]redrive.AuditAction, error) {
	if f.Limit < 0 || f.BeforeID < 0 {
		return nil, errors.New("postgres: list actions: negative limit or before-id")
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	var a args
	where := "true"
	if f.BeforeID > 0 {
		where = "id < " + a.add(f.BeforeID)
	}
	rows, err := s.pool.Query(ctx, `SELECT id, at, actor, kind, filter, count, detail FROM `+s.q+`.audit_log
		WHERE `+where+` ORDER BY id DESC`+limitClause(&a, f.Limit), a...)
	if err != nil {
		return nil, s.fail("list actions", err)
	}
	out, err := pgx.CollectRows(rows, scanAction)
	if err != nil {
		return nil, s.fail("list actions", err)
	}
	return out, nil
}

// scanAction reads an audit_log row selected as id, at, actor, kind,
// filter, count, detail.
func scanAction(row pgx.CollectableRow) (redrive.AuditAction, error) {
	var x redrive.AuditAction
	err := row.Scan(&x.ID, &x.At, &x.Actor, &x.Kind, &x.Filter, &x.Count, &x.Detail)
	x.At = x.At.UTC()
	return x, err
}
