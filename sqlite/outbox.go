package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redrive/redrive"
)

var _ redrive.Outbox = (*Store)(nil)
var _ redrive.DeliveredCounter = (*Store)(nil)

// Subscribe sets the events announced for pipeline; the triggers of
// migration 0009 write outbox rows for them in the transaction of each
// state change.
func (s *Store) Subscribe(ctx context.Context, pipeline string, events []string, now time.Time) error {
	if pipeline == "" {
		return errors.New("sqlite: subscribe: pipeline is required")
	}
	for _, e := range events {
		if !redrive.ValidEvent(e) {
			return fmt.Errorf("sqlite: subscribe: pipeline %q: unknown event %q", pipeline, e)
		}
	}
	return s.writeTx(ctx, "subscribe", func(tx *sql.Tx) error {
		if len(events) == 0 {
			_, err := tx.ExecContext(ctx, `DELETE FROM outbox_subscriptions WHERE pipeline = ?`, pipeline)
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO outbox_subscriptions (pipeline, events, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (pipeline) DO UPDATE SET events = excluded.events, updated_at = excluded.updated_at`,
			pipeline, ","+strings.Join(events, ",")+",", tnz(now))
		return err
	})
}

const outboxColumns = `id, delivery_id, event, pipeline, run_id, item_id, item_key, stage, reason_class,
	reason_error, reason_attempts, run_status, run_reason, occurred_at, status, attempts, rate_limit_waits,
	next_at, lease_token, last_error, updated_at, callback, output, output_size`

func scanNotification(sc interface{ Scan(...any) error }) (redrive.Notification, error) {
	var (
		n                                              redrive.Notification
		itemID, rAttempts                              sql.NullInt64
		key, stage, rClass, rError, runStatus, runReas sql.NullString
		occurred, next, updated                        int64
		status                                         string
		callback                                       sql.NullString
		output                                         []byte
		outputSize                                     sql.NullInt64
	)
	err := sc.Scan(&n.ID, &n.DeliveryID, &n.Event, &n.Pipeline, &n.RunID, &itemID, &key, &stage, &rClass,
		&rError, &rAttempts, &runStatus, &runReas, &occurred, &status, &n.Attempts, &n.RateLimitWaits,
		&next, &n.Token, &n.LastError, &updated, &callback, &output, &outputSize)
	if err != nil {
		return n, err
	}
	if outputSize.Valid {
		n.OutputSize = int(outputSize.Int64)
		n.Output, n.OutputOmitted = notificationOutput(output, n.OutputSize)
	}
	n.ItemID, n.ItemKey, n.Stage, n.Callback = itemID.Int64, key.String, stage.String, callback.String
	n.RunStatus, n.RunReason = redrive.RunStatus(runStatus.String), runReas.String
	n.OccurredAt, n.NextAt, n.UpdatedAt = ntz(occurred), ntz(next), ntz(updated)
	n.Status = redrive.NotificationStatus(status)
	if rClass.Valid {
		n.Reason = &redrive.Reason{Stage: stage.String, Class: rClass.String, Error: rError.String,
			Attempts: int(rAttempts.Int64), At: n.OccurredAt}
	}
	return n, nil
}

// ClaimNotifications leases due pending notifications. SQLite has one
// writer at a time, so the claim needs no row locks.
func (s *Store) ClaimNotifications(ctx context.Context, req redrive.ClaimRequest) ([]redrive.Notification, error) {
	if len(req.Pipelines) == 0 || req.Limit <= 0 {
		return nil, nil
	}
	args := []any{tnz(req.LeaseUntil), req.Owner, tnz(req.Now), tnz(req.Now)}
	for _, p := range req.Pipelines {
		args = append(args, p)
	}
	args = append(args, req.Limit)
	var out []redrive.Notification
	err := s.writeTx(ctx, "claim notifications", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `UPDATE outbox SET next_at = ?, lease_owner = ?, lease_token = lease_token + 1,
			updated_at = ?
			WHERE id IN (SELECT id FROM outbox WHERE status = 'pending' AND next_at <= ?
				AND pipeline IN (`+placeholders(len(req.Pipelines))+`) ORDER BY next_at, id LIMIT ?)
			RETURNING `+outboxColumns, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			n, err := scanNotification(rows)
			if err != nil {
				return err
			}
			out = append(out, n)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SettleNotifications records delivery results in one transaction.
func (s *Store) SettleNotifications(ctx context.Context, rs []redrive.DeliveryResult) ([]bool, error) {
	for i, r := range rs {
		switch r.Status {
		case redrive.NotificationPending, redrive.NotificationDelivered, redrive.NotificationDead:
		default:
			return nil, fmt.Errorf("sqlite: settle notifications: result %d (notification %d): invalid status %q", i, r.ID, r.Status)
		}
	}
	applied := make([]bool, len(rs))
	err := s.writeTx(ctx, "settle notifications", func(tx *sql.Tx) error {
		for i, r := range rs {
			next := tnz(r.NextAt)
			if r.Status != redrive.NotificationPending {
				next = tnz(r.Now)
			}
			res, err := tx.ExecContext(ctx, `UPDATE outbox SET status = ?, attempts = ?, rate_limit_waits = ?,
				next_at = ?, last_error = ?, updated_at = ?, lease_owner = NULL, lease_token = lease_token + 1
				WHERE id = ? AND lease_token = ? AND status = 'pending'`,
				string(r.Status), r.Attempts, r.RateLimitWaits, next, r.Error, tnz(r.Now), r.ID, r.Token)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			applied[i] = n == 1
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

func notificationWhere(f redrive.NotificationFilter) (string, []any) {
	where := []string{"1"}
	var args []any
	if f.Pipeline != "" {
		where = append(where, "pipeline = ?")
		args = append(args, f.Pipeline)
	}
	if len(f.Statuses) > 0 {
		where = append(where, "status IN ("+placeholders(len(f.Statuses))+")")
		for _, st := range f.Statuses {
			args = append(args, string(st))
		}
	}
	if f.Event != "" {
		where = append(where, "event = ?")
		args = append(args, f.Event)
	}
	if f.AfterID > 0 {
		where = append(where, "id > ?")
		args = append(args, f.AfterID)
	}
	return strings.Join(where, " AND "), args
}

// ListNotifications lists notifications selected by f in ID order.
func (s *Store) ListNotifications(ctx context.Context, f redrive.NotificationFilter) ([]redrive.Notification, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("sqlite: list notifications: %w", err)
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	where, args := notificationWhere(f)
	args = append(args, f.Limit)
	rows, err := s.r.QueryContext(ctx, `SELECT `+outboxColumns+` FROM outbox WHERE `+where+` ORDER BY id LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list notifications: %w", err)
	}
	defer rows.Close()
	out := []redrive.Notification{}
	for rows.Next() {
		n, err := scanNotification(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list notifications: %w", err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list notifications: %w", err)
	}
	return out, nil
}

// RedriveNotifications makes dead notifications pending again.
func (s *Store) RedriveNotifications(ctx context.Context, f redrive.NotificationFilter, now time.Time) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("sqlite: redrive notifications: %w", err)
	}
	for _, st := range f.Statuses {
		if st != redrive.NotificationDead {
			return 0, fmt.Errorf("sqlite: redrive notifications: %w: only dead notifications are redriven, not %s",
				redrive.ErrBadNotificationFilter, st)
		}
	}
	f.Statuses = []redrive.NotificationStatus{redrive.NotificationDead}
	where, args := notificationWhere(f)
	lim := ""
	if f.Limit > 0 {
		lim = fmt.Sprintf(" ORDER BY id LIMIT %d", f.Limit)
	}
	var n int64
	err := s.writeTx(ctx, "redrive notifications", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE outbox SET status = 'pending', attempts = 0, rate_limit_waits = 0,
			next_at = ?, updated_at = ?, lease_owner = NULL
			WHERE id IN (SELECT id FROM outbox WHERE `+where+lim+`)`,
			append([]any{tnz(now), tnz(now)}, args...)...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// CountNotifications counts the notifications of f's pipeline and event by
// status.
func (s *Store) CountNotifications(ctx context.Context, f redrive.NotificationFilter) (redrive.NotificationCounts, error) {
	var c redrive.NotificationCounts
	if err := f.Validate(); err != nil {
		return c, fmt.Errorf("sqlite: count notifications: %w", err)
	}
	where, args := notificationWhere(redrive.NotificationFilter{Pipeline: f.Pipeline, Event: f.Event})
	rows, err := s.r.QueryContext(ctx, `SELECT status, count(*) FROM outbox WHERE `+where+` GROUP BY status`, args...)
	if err != nil {
		return c, fmt.Errorf("sqlite: count notifications: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return c, fmt.Errorf("sqlite: count notifications: %w", err)
		}
		c.Add(redrive.NotificationStatus(st), n)
	}
	if err := rows.Err(); err != nil {
		return c, fmt.Errorf("sqlite: count notifications: %w", err)
	}
	return c, nil
}

// DeleteDelivered deletes up to limit notifications delivered before
// before. A delivered row's updated_at is when it was delivered.
func (s *Store) DeleteDelivered(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int64
	err := s.writeTx(ctx, "delete delivered notifications", func(tx *sql.Tx) error {
		// outbox_delivered (migration 0026) holds the batch in the order
		// it is taken; by ID, each batch sorted every delivered row.
		res, err := tx.ExecContext(ctx, `DELETE FROM outbox WHERE id IN (SELECT id FROM outbox INDEXED BY outbox_delivered
			WHERE status = 'delivered' AND updated_at < ? ORDER BY updated_at LIMIT ?)`, tnz(before), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// CountDelivered counts the notifications delivered before before, at
// most limit (0: no limit); see redrive.DeliveredCounter.
func (s *Store) CountDelivered(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		limit = -1 // SQLite's LIMIT -1: none
	}
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM outbox INDEXED BY outbox_delivered
		WHERE status = 'delivered' AND updated_at < ? LIMIT ?)`, tnz(before), limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sqlite: count delivered notifications: %w", err)
	}
	return n, nil
}

// notificationOutput reads the output columns of an item.succeeded row:
// output NULL with a size is an output left out, unless the size is 0
// (an empty output, which a driver may scan as nil).
func notificationOutput(output []byte, size int) ([]byte, bool) {
	if output == nil && size > 0 {
		return nil, true
	}
	if output == nil {
		output = []byte{}
	}
	return output, false
}
