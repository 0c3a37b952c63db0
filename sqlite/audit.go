package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/redrive/redrive"
)

// RecordAction appends a to the audit log.
func (s *Store) RecordAction(ctx context.Context, a redrive.AuditAction) (int64, error) {
	if a.Actor == "" || a.Kind == "" {
		return 0, errors.New("sqlite: record action: actor and kind are required")
	}
	var id int64
	err := s.writeTx(ctx, "record action", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO audit_log (at, actor, kind, filter, count, detail) VALUES (?, ?, ?, ?, ?, ?)`,
			tnz(a.At), a.Actor, a.Kind, a.Filter, a.Count, a.Detail)
		if err != nil {
			return err
		}
		id, err = res.LastInsertId()
		return err
	})
	return id, err
}

// ListActions lists the audit log, newest first.
func (s *Store) ListActions(ctx context.Context, f redrive.AuditFilter) ([]redrive.AuditAction, error) {
	if f.Limit < 0 || f.BeforeID < 0 {
		return nil, errors.New("sqlite: list actions: negative limit or before-id")
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	q, args := `SELECT id, at, actor, kind, filter, count, detail FROM audit_log`, []any{}
	if f.BeforeID > 0 {
		q += ` WHERE id < ?`
		args = append(args, f.BeforeID)
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY id DESC`+limitClause(f.Limit), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list actions: %w", err)
	}
	out, err := scanActions(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list actions: %w", err)
	}
	return out, nil
}

// scanActions reads and closes audit_log rows selected as id, at, actor,
// kind, filter, count, detail.
func scanActions(rows *sql.Rows) ([]redrive.AuditAction, error) {
	defer rows.Close()
	var out []redrive.AuditAction
	for rows.Next() {
		var a redrive.AuditAction
		var at int64
		if err := rows.Scan(&a.ID, &at, &a.Actor, &a.Kind, &a.Filter, &a.Count, &a.Detail); err != nil {
			return nil, err
		}
		a.At = ntz(at)
		out = append(out, a)
	}
	return out, rows.Err()
}
