package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

var _ redrive.Outbox = (*Store)(nil)
var _ redrive.DeliveredCounter = (*Store)(nil)

// Subscribe sets the events announced for pipeline; the triggers of
// migration 0009 write outbox rows for them in the transaction of each
// state change.
func (s *Store) Subscribe(ctx context.Context, pipeline string, events []string, now time.Time) error {
	if pipeline == "" {
		return errors.New("postgres: subscribe: pipeline is required")
	}
	for _, e := range events {
		if !redrive.ValidEvent(e) {
			return fmt.Errorf("postgres: subscribe: pipeline %q: unknown event %q", pipeline, e)
		}
	}
	var err error
	if len(events) == 0 {
		_, err = s.pool.Exec(ctx, `DELETE FROM `+s.q+`.outbox_subscriptions WHERE pipeline = $1`, pipeline)
	} else {
		_, err = s.pool.Exec(ctx, `INSERT INTO `+s.q+`.outbox_subscriptions (pipeline, events, updated_at)
			VALUES ($1, $2, $3)
			ON CONFLICT (pipeline) DO UPDATE SET events = excluded.events, updated_at = excluded.updated_at`,
			pipeline, events, now)
	}
	if err != nil {
		return s.fail("subscribe", err)
	}
	return nil
}

const outboxColumns = `id, delivery_id, event, pipeline, run_id, item_id, item_key, stage, reason_class,
	reason_error, reason_attempts, run_status, run_reason, occurred_at, status, attempts, rate_limit_waits,
	next_at, lease_token, last_error, updated_at, callback, output, output_size`

func scanNotification(row pgx.Row) (redrive.Notification, error) {
	var (
		n                                            redrive.Notification
		itemID                                       *int64
		rAttempts                                    *int32
		key, stage, rClass, rError, runStatus, runRs *string
		status                                       string
		callback                                     *string
		output                                       []byte
		outputSize                                   *int32
	)
	err := row.Scan(&n.ID, &n.DeliveryID, &n.Event, &n.Pipeline, &n.RunID, &itemID, &key, &stage, &rClass,
		&rError, &rAttempts, &runStatus, &runRs, &n.OccurredAt, &status, &n.Attempts, &n.RateLimitWaits,
		&n.NextAt, &n.Token, &n.LastError, &n.UpdatedAt, &callback, &output, &outputSize)
	if err != nil {
		return n, err
	}
	if outputSize != nil {
		n.OutputSize = int(*outputSize)
		n.Output, n.OutputOmitted = notificationOutput(output, n.OutputSize)
	}
	if itemID != nil {
		n.ItemID = *itemID
	}
	n.ItemKey, n.Stage, n.Callback = deref(key), deref(stage), deref(callback)
	n.RunStatus, n.RunReason = redrive.RunStatus(deref(runStatus)), deref(runRs)
	n.OccurredAt, n.NextAt, n.UpdatedAt = n.OccurredAt.UTC(), n.NextAt.UTC(), n.UpdatedAt.UTC()
	n.Status = redrive.NotificationStatus(status)
	if rClass != nil {
		n.Reason = &redrive.Reason{Stage: n.Stage, Class: *rClass, Error: deref(rError), At: n.OccurredAt}
		if rAttempts != nil {
			n.Reason.Attempts = int(*rAttempts)
		}
	}
	return n, nil
}

func (s *Store) queryNotifications(ctx context.Context, sql string, a args) ([]redrive.Notification, error) {
	rows, err := s.pool.Query(ctx, sql, a...)
	if err != nil {
		return nil, err
	}
	return collectNotifications(rows)
}

func collectNotifications(rows pgx.Rows) ([]redrive.Notification, error) {
	defer rows.Close()
	out := []redrive.Notification{}
	for rows.Next() {
		n, err := scanNotification(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// notificationClaimPlan are the planner settings of ClaimNotifications:
// no sort, no bitmap scan, no JIT. After a VACUUM of an emptied outbox
// (a drained outbox, its pages kept) PostgreSQL estimates one row however
// many are due, and sorted every due notification to take the first ones
// (an external merge of 100,000 rows per claim of 100); without sorts the
// walk follows outbox_due in next_at order and sorts only the ties.
const notificationClaimPlan = planSettings + `, set_config('jit', 'off', true)`

// ClaimNotifications leases due pending notifications; rows another
// claimer holds locked are skipped, so several workers share the outbox.
func (s *Store) ClaimNotifications(ctx context.Context, req redrive.ClaimRequest) ([]redrive.Notification, error) {
	if len(req.Pipelines) == 0 || req.Limit <= 0 {
		return nil, nil
	}
	sql, a := s.claimNotificationsSQL(req)
	var out []redrive.Notification
	err := s.queryPlanned(ctx, notificationClaimPlan, sql, a, func(rows pgx.Rows) (err error) {
		out, err = collectNotifications(rows)
		return err
	})
	if err != nil {
		return nil, s.fail("claim notifications", err)
	}
	slices.SortFunc(out, func(x, y redrive.Notification) int { return cmp.Compare(x.ID, y.ID) })
	return out, nil
}

// claimNotificationsSQL is ClaimNotifications' statement. The walk of
// outbox_due hands the UPDATE the addresses of the rows it locked, as a
// claim of items does (see claimSQL), and the UPDATE repeats none of its
// conditions: by ID and status, after the VACUUM of an emptied outbox,
// the UPDATE walked every pending notification of outbox_status and
// filtered it by the IDs (TestNotificationClaimAfterEmptiedVacuum). A
// notification updated meanwhile by another transaction is left to a
// later claim.
func (s *Store) claimNotificationsSQL(req redrive.ClaimRequest) (string, args) {
	var a args
	until, owner, now := a.add(req.LeaseUntil), a.add(req.Owner), a.add(req.Now)
	return `UPDATE ` + s.q + `.outbox SET next_at = ` + until + `, lease_owner = ` + owner + `,
		lease_token = lease_token + 1, updated_at = ` + now + `
		WHERE ctid = ANY(ARRAY(SELECT c.ctid FROM ` + s.q + `.outbox c
			WHERE c.status = 'pending' AND c.next_at <= ` + now + ` AND c.pipeline = ANY(` + a.add(req.Pipelines) + `::text[])
			ORDER BY c.next_at, c.id LIMIT ` + a.add(req.Limit) + ` FOR UPDATE SKIP LOCKED))
		RETURNING ` + outboxColumns, a
}

// SettleNotifications records delivery results with one statement.
func (s *Store) SettleNotifications(ctx context.Context, rs []redrive.DeliveryResult) ([]bool, error) {
	applied := make([]bool, len(rs))
	if len(rs) == 0 {
		return applied, nil
	}
	type ref struct{ id, token int64 }
	idx := make(map[ref]int, len(rs))
	var (
		ids, tokens     []int64
		statuses, errs  []string
		attempts, waits []int32
		nexts, nows     []time.Time
	)
	for i, r := range rs {
		switch r.Status {
		case redrive.NotificationPending, redrive.NotificationDelivered, redrive.NotificationDead:
		default:
			return nil, fmt.Errorf("postgres: settle notifications: result %d (notification %d): invalid status %q", i, r.ID, r.Status)
		}
		if _, dup := idx[ref{r.ID, r.Token}]; dup {
			continue
		}
		idx[ref{r.ID, r.Token}] = i
		next := r.NextAt
		if r.Status != redrive.NotificationPending {
			next = r.Now
		}
		ids, tokens = append(ids, r.ID), append(tokens, r.Token)
		statuses, errs = append(statuses, string(r.Status)), append(errs, r.Error)
		attempts, waits = append(attempts, int32(r.Attempts)), append(waits, int32(r.RateLimitWaits))
		nexts, nows = append(nexts, next), append(nows, r.Now)
	}
	var r ref
	err := s.queryPlanned(ctx, completePlan, s.settleNotificationsSQL(), []any{ids, tokens, statuses, attempts, waits, nexts, errs, nows},
		func(rows pgx.Rows) error {
			_, err := pgx.ForEachRow(rows, []any{&r.id, &r.token}, func() error {
				if i, ok := idx[r]; ok {
					applied[i] = true
				}
				return nil
			})
			return err
		})
	if err != nil {
		return nil, s.fail("settle notifications", err)
	}
	return applied, nil
}

// settleNotificationsSQL is SettleNotifications' statement: the results
// ($1 IDs, $2 lease tokens, then status, attempts, rate-limit waits, next
// due time, error and time) joined to the outbox as a completion joins
// its items (see completePlan): by ID, among the IDs named. Joined by ID
// alone, after the VACUUM of a drained outbox the planner walked every
// pending notification for each settle (16 – 24 ms for 100 results behind
// 60,000 pending, a cost that grows with the backlog a down endpoint
// leaves, on the path that delivers it). The lease token alone fences a
// result: every claim and every settle moves it on, and nothing else
// takes a notification out of pending, so a token still held is a pending
// notification's. A condition on the status made the planner walk the
// pending entries of outbox_status and filter them by the IDs.
func (s *Store) settleNotificationsSQL() string {
	return `UPDATE ` + s.q + `.outbox o SET status = u.status, attempts = u.attempts,
		rate_limit_waits = u.waits, next_at = u.next_at, last_error = u.err, updated_at = u.now,
		lease_owner = '', lease_token = o.lease_token + 1
		FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::int[], $5::int[], $6::timestamptz[], $7::text[],
			$8::timestamptz[]) AS u(id, token, status, attempts, waits, next_at, err, now)
		WHERE o.id = u.id AND o.id = ANY($1::bigint[]) AND o.lease_token = u.token
		RETURNING o.id, u.token`
}

func notificationWhere(f redrive.NotificationFilter, a *args) string {
	where := "true"
	if f.Pipeline != "" {
		where += " AND pipeline = " + a.add(f.Pipeline)
	}
	if len(f.Statuses) > 0 {
		ss := make([]string, len(f.Statuses))
		for i, st := range f.Statuses {
			ss[i] = string(st)
		}
		where += " AND status = ANY(" + a.add(ss) + "::text[])"
	}
	if f.Event != "" {
		where += " AND event = " + a.add(f.Event)
	}
	if f.AfterID > 0 {
		where += " AND id > " + a.add(f.AfterID)
	}
	return where
}

// ListNotifications lists notifications selected by f in ID order.
func (s *Store) ListNotifications(ctx context.Context, f redrive.NotificationFilter) ([]redrive.Notification, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("postgres: list notifications: %w", err)
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	var a args
	where := notificationWhere(f, &a)
	out, err := s.queryNotifications(ctx, `SELECT `+outboxColumns+` FROM `+s.q+`.outbox WHERE `+where+
		` ORDER BY id`+limitClause(&a, f.Limit), a)
	if err != nil {
		return nil, s.fail("list notifications", err)
	}
	return out, nil
}

// RedriveNotifications makes dead notifications pending again.
func (s *Store) RedriveNotifications(ctx context.Context, f redrive.NotificationFilter, now time.Time) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("postgres: redrive notifications: %w", err)
	}
	for _, st := range f.Statuses {
		if st != redrive.NotificationDead {
			return 0, fmt.Errorf("postgres: redrive notifications: %w: only dead notifications are redriven, not %s",
				redrive.ErrBadNotificationFilter, st)
		}
	}
	f.Statuses = []redrive.NotificationStatus{redrive.NotificationDead}
	// Selected and locked, then written by ID (see bulkPlan): in one
	// statement, after the VACUUM of a drained outbox (reltuples 0 over
	// the pages kept, see completePlan), the planner ran the locking
	// selection once
	// per dead notification, each time sorting them all, and each run
	// locked the next rows, past those already redriven: a redrive of
	// 1,000 of 20,000 dead notifications redrove all of them, in 64 s.
	var a args
	sel := `SELECT id FROM ` + s.q + `.outbox WHERE ` + notificationWhere(f, &a) + ` ORDER BY id` + limitClause(&a, f.Limit) + ` FOR UPDATE`
	n, err := s.writeLocked(ctx, sel, a, false, func(tx pgx.Tx, ids []int64) (int64, error) {
		tag, err := tx.Exec(ctx, s.redriveNotificationsIDsSQL(), ids, now)
		return tag.RowsAffected(), err
	})
	if err != nil {
		return 0, s.fail("redrive notifications", err)
	}
	return n, nil
}

// redriveNotificationsIDsSQL is RedriveNotifications' write of the locked
// notifications $1, due at $2.
func (s *Store) redriveNotificationsIDsSQL() string {
	return `UPDATE ` + s.q + `.outbox o SET status = 'pending', attempts = 0, rate_limit_waits = 0,
		next_at = $2, updated_at = $2, lease_owner = ''
		FROM unnest($1::bigint[]) AS u(id) WHERE o.id = u.id AND o.id = ANY($1::bigint[])`
}

// CountNotifications counts the notifications of f's pipeline and event by
// status.
func (s *Store) CountNotifications(ctx context.Context, f redrive.NotificationFilter) (redrive.NotificationCounts, error) {
	var c redrive.NotificationCounts
	if err := f.Validate(); err != nil {
		return c, fmt.Errorf("postgres: count notifications: %w", err)
	}
	var a args
	where := notificationWhere(redrive.NotificationFilter{Pipeline: f.Pipeline, Event: f.Event}, &a)
	rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM `+s.q+`.outbox WHERE `+where+` GROUP BY status`, a...)
	if err != nil {
		return c, s.fail("count notifications", err)
	}
	var st string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		c.Add(redrive.NotificationStatus(st), int(n))
		return nil
	})
	if err != nil {
		return c, s.fail("count notifications", err)
	}
	return c, nil
}

// DeleteDelivered deletes up to limit notifications delivered before
// before. A delivered row's updated_at is when it was delivered. Every
// 10,000 deleted, the store vacuums the outbox in the background
// (sidevacuum.go).
//
// The batch walks outbox_delivered (migration 0026) in delivery order,
// planned with retainSettings so that no statistics can make it sort the
// delivered notifications instead, and is deleted by the addresses of the
// rows the walk locked, as DeleteSucceeded deletes items.
func (s *Store) DeleteDelivered(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := s.countPlanned(ctx, retainSettings, s.deleteDeliveredSQL(), before, limit)
	if err != nil {
		return 0, s.fail("delete delivered notifications", err)
	}
	s.outboxDeletedN(n)
	return n, nil
}

// deleteDeliveredSQL is DeleteDelivered's statement; its arguments are
// the cutoff and the limit, and it returns how many rows it deleted.
// Delivered rows are not written again, so
// SKIP LOCKED only keeps two retention passes off each other's batch.
func (s *Store) deleteDeliveredSQL() string {
	return `WITH d AS (DELETE FROM ` + s.q + `.outbox WHERE ctid = ANY(ARRAY(SELECT ctid FROM ` + s.q + `.outbox
		WHERE status = 'delivered' AND updated_at < $1 ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED)) RETURNING 1)
	SELECT count(*) FROM d`
}

// CountDelivered counts the notifications delivered before before, at
// most limit (0: no limit); see redrive.DeliveredCounter. It walks
// outbox_delivered as DeleteDelivered does, whatever the statistics.
func (s *Store) CountDelivered(ctx context.Context, before time.Time, limit int) (int, error) {
	var a args
	sql := `SELECT count(*) FROM (SELECT 1 FROM ` + s.q + `.outbox WHERE status = 'delivered' AND updated_at < ` + a.add(before) +
		limitClause(&a, limit) + `) d`
	n, err := s.countPlanned(ctx, retainSettings, sql, a...)
	if err != nil {
		return 0, s.fail("count delivered notifications", err)
	}
	return n, nil
}

// countPlanned runs sql, which selects one count, with args after the
// planner settings (see queryPlanned) and returns the count.
func (s *Store) countPlanned(ctx context.Context, settings, sql string, args ...any) (int, error) {
	var n int64
	err := s.queryPlanned(ctx, settings, sql, args, func(rows pgx.Rows) error {
		var err error
		n, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
		return err
	})
	return int(n), err
}

// notificationOutput reads the output columns of an item.succeeded row:
// output NULL with a size is an output left out, unless the size is 0
// (an empty output).
func notificationOutput(output []byte, size int) ([]byte, bool) {
	if output == nil && size > 0 {
		return nil, true
	}
	if output == nil {
		output = []byte{}
	}
	return output, false
}
