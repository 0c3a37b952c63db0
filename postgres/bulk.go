package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// The operators' bulk actions (RetryNow, CancelPending, Redrive, Purge and
// RedriveFrom, with a limit or an ID list) select and lock their items in
// one statement and write them by ID in a second, in one transaction. In
// one statement, the write found the items it had selected by a
// condition on their IDs, and after the VACUUM of an emptied items table
// (reltuples 0 over the pages kept, see completePlan) the planner read
// them through whichever index the write's other conditions matched and
// filtered each entry by the list: Redrive joined every dead item with
// the selection (2 s for 1,000 of 10,000 dead items, 5.8 s of 30,000: the
// product of the two), RetryNow and CancelPending walked every pending
// entry of items_run_state and Purge every entry of items_cause, a cost
// per action that grew with the table. The second statement is the
// completion's join (see completePlan): by ID, among the IDs named, with
// the planner left only hash joins and items_pkey. It holds no condition
// but the IDs: the rows are locked since the first statement, so nothing
// changed them, and as a new statement it sees the newest version of each
// (an item promoted between an operator's snapshot and the lock is still
// retried, which an address would miss).

// bulkPlan are the planner settings of a bulk action's write: a
// completion's (see completePlan).
const bulkPlan = completePlan

// bulkNoJIT turns JIT compilation off for a bulk action's transaction:
// with statistics, the selection of RedriveFrom (a lookup of attempts per
// item) is priced above jit_above_cost and spent 145 ms of its 150
// compiling, for 1,000 items.
const bulkNoJIT = `SELECT set_config('jit', 'off', true)`

// lockedIDs runs sel, a SELECT of IDs that locks their rows, in tx.
func lockedIDs(ctx context.Context, tx pgx.Tx, sel string, a args) ([]int64, error) {
	rows, err := tx.Query(ctx, sel, a...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// selectIDsSQL selects the IDs of the items f selects in ID order, up to
// f.Limit, locking them as lock says (FOR UPDATE, with SKIP LOCKED or not).
func (s *Store) selectIDsSQL(f redrive.ItemFilter, lock string, a *args) string {
	return `SELECT id FROM ` + s.q + `.items WHERE ` + s.itemWhere(f, a) + ` ORDER BY id` + limitClause(a, f.Limit) + ` ` + lock
}

// redriveSelectSQL is Redrive's selection when it counts its failures
// (see countsFailures): it locks the items f selects as selectIDsSQL
// does and, in the same statement, takes them off their failure groups,
// one row per group, from the values the write is about to clear (the
// rows stay locked until it does); it returns their IDs in ID order.
func (s *Store) redriveSelectSQL(f redrive.ItemFilter, a *args) string {
	return `WITH sel AS (SELECT id, pipeline, stage, reason_class, reason_fingerprint, run_id, state
		FROM ` + s.q + `.items WHERE ` + s.itemWhere(f, a) + ` ORDER BY id` + limitClause(a, f.Limit) + ` FOR UPDATE),
	` + s.itemFailuresGone("sel") + `
	SELECT id FROM sel ORDER BY id`
}

// writeLocked runs, in one transaction, sel (see lockedIDs) and then, if
// it selected any row, write on the IDs, planned with bulkPlan; write
// returns the statement's count. notify notifies listeners in the same
// transaction when the write changed any row.
func (s *Store) writeLocked(ctx context.Context, sel string, a args, notify bool, write func(tx pgx.Tx, ids []int64) (int64, error)) (int, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, bulkNoJIT); err != nil {
			return err
		}
		ids, err := lockedIDs(ctx, tx, sel, a)
		if err != nil || len(ids) == 0 {
			return err
		}
		if _, err := tx.Exec(ctx, bulkPlan); err != nil {
			return err
		}
		if n, err = write(tx, ids); err != nil || n == 0 || !notify {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, s.channel)
		return err
	})
	return int(n), err
}

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
	var n int
	if f.Limit > 0 {
		var a args
		sel := s.selectIDsSQL(f, "FOR UPDATE SKIP LOCKED", &a)
		n, err = s.writeLocked(ctx, sel, a, true, func(tx pgx.Tx, ids []int64) (int64, error) {
			tag, err := tx.Exec(ctx, s.retryNowIDsSQL(), ids, now)
			return tag.RowsAffected(), err
		})
	} else {
		var a args
		nowP := a.add(now)
		// ready = true puts the items in items_ready, which Claim walks,
		// so the next claim sees them without waiting for promotion.
		sql := `UPDATE ` + s.q + `.items SET next_at = ` + nowP + `, ready = true, updated_at = ` + nowP + `
			WHERE state = 'pending' AND lease_expires_at IS NULL AND next_at > ` + nowP + ` AND ` + s.itemWhere(f, &a)
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, sql, a...)
			if err != nil {
				return err
			}
			if n = int(tag.RowsAffected()); n > 0 {
				_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, s.channel)
			}
			return err
		})
	}
	if err != nil {
		return 0, s.fail("retry now", err)
	}
	// Items made ready anywhere in claim order (claimfrom.go).
	s.resume.forget()
	return n, nil
}

// retryNowIDsSQL is RetryNow's write of the locked items $1 at $2.
func (s *Store) retryNowIDsSQL() string {
	return `UPDATE ` + s.q + `.items i SET next_at = $2, ready = true, updated_at = $2
		FROM unnest($1::bigint[]) AS u(id) WHERE i.id = u.id AND i.id = ANY($1::bigint[])`
}

// CancelPending cancels the pending items selected by f (f.States must be
// empty or pending) with reason r and returns how many it canceled. An
// empty r.Stage means each item's current stage; r.Attempts 0 means each
// item's attempt counter. The items' UpdatedAt becomes r.At. Items claimed
// meanwhile are not canceled.
func (s *Store) CancelPending(ctx context.Context, f redrive.ItemFilter, r redrive.Reason) (int, error) {
	f, err := withStates("cancel pending", f, redrive.StatePending, redrive.StatePending)
	if err != nil {
		return 0, err
	}
	counted, err := s.countsFailures(ctx)
	if err != nil {
		return 0, s.fail("cancel pending", err)
	}
	var n int
	if f.Limit > 0 {
		var a args
		sel := s.selectIDsSQL(f, "FOR UPDATE SKIP LOCKED", &a)
		n, err = s.writeLocked(ctx, sel, a, false, func(tx pgx.Tx, ids []int64) (n int64, err error) {
			sql, a := s.cancelIDsSQL(ids, r, counted)
			err = tx.QueryRow(ctx, sql, a...).Scan(&n)
			return n, err
		})
	} else {
		var a args
		set := cancelSet(&a, r)
		err = s.pool.QueryRow(ctx, s.cancelCounted(`UPDATE `+s.q+`.items SET `+set+` WHERE state = 'pending' AND lease_expires_at IS NULL AND `+
			s.itemWhere(f, &a), counted), a...).Scan(&n)
	}
	if err != nil {
		return 0, s.fail("cancel pending", err)
	}
	return n, nil
}

// cancelCounted wraps upd, an UPDATE that cancels items, into a statement
// that returns how many it canceled; with counted (see countsFailures) it
// also adds them to their failure groups, one row per group, and the
// triggers skip it.
func (s *Store) cancelCounted(upd string, counted bool) string {
	if !counted {
		return `WITH c AS (` + upd + ` RETURNING 1) SELECT count(*) FROM c`
	}
	return `WITH c AS (` + upd + ` AND ` + failuresCounted + `
		RETURNING pipeline, stage, reason_class, reason_fingerprint, run_id, state),
	` + s.itemFailuresCome("c") + `
	SELECT count(*) FROM c`
}

// cancelSet is CancelPending's SET clause for reason r.
func cancelSet(a *args, r redrive.Reason) string {
	at := a.add(r.At)
	return `state = 'canceled', updated_at = ` + at + `,
		reason_stage = coalesce(nullif(` + a.add(r.Stage) + `, ''), stage),
		reason_class = ` + a.add(r.Class) + `, reason_error = ` + a.add(r.Error) + `,
		reason_attempts = coalesce(nullif(` + a.add(r.Attempts) + `::int, 0), attempt),
		reason_at = ` + at + `, reason_fingerprint = ` + a.add(redrive.Fingerprint(r.Error))
}

// cancelIDsSQL is CancelPending's write of the locked items ids, which
// returns how many it canceled (see cancelCounted).
func (s *Store) cancelIDsSQL(ids []int64, r redrive.Reason, counted bool) (string, args) {
	var a args
	idsP := a.add(ids)
	set := cancelSet(&a, r)
	return s.cancelCounted(`UPDATE `+s.q+`.items i SET `+set+`
		FROM unnest(`+idsP+`::bigint[]) AS u(id) WHERE i.id = u.id AND i.id = ANY(`+idsP+`::bigint[])`, counted), a
}

// Redrive sends the dead or canceled items selected by f (f.States empty
// means dead) back to pending at the stage they stopped at, with attempt
// and rate-limit counters at 0 and the reason cleared; their attempts are
// kept. The i-th item in ID order is due at now + i*interval. The runs of
// the redriven items reopen (status running, no finish time or reason) and
// listeners are notified, in the same transaction.
func (s *Store) Redrive(ctx context.Context, f redrive.ItemFilter, now time.Time, interval time.Duration) (int, error) {
	if interval < 0 {
		return 0, errors.New("postgres: redrive: negative interval")
	}
	f, err := withStates("redrive", f, redrive.StateDead, redrive.StateDead, redrive.StateCanceled)
	if err != nil {
		return 0, err
	}
	counted, err := s.countsFailures(ctx)
	if err != nil {
		return 0, s.fail("redrive", err)
	}
	var a args
	var sel string
	if counted {
		sel = s.redriveSelectSQL(f, &a)
	} else {
		sel = s.selectIDsSQL(f, "FOR UPDATE", &a)
	}
	n, err := s.writeLocked(ctx, sel, a, true, func(tx pgx.Tx, ids []int64) (n int64, err error) {
		err = tx.QueryRow(ctx, s.redriveIDsSQL(counted), ids, now, interval.Microseconds()).Scan(&n)
		return n, err
	})
	if err != nil {
		return 0, s.fail("redrive", err)
	}
	// Items made ready anywhere in claim order (claimfrom.go).
	s.resume.forget()
	return n, nil
}

// redriveIDsSQL is Redrive's write of the locked items $1, the i-th due at
// $2 + i*$3 microseconds, which reopens their runs and returns how many
// items it redrove. With counted (see countsFailures) the failure-count
// triggers skip it: its selection (redriveSelectSQL) took the items off
// their groups.
func (s *Store) redriveIDsSQL(counted bool) string {
	cond := ``
	if counted {
		cond = ` AND ` + failuresCounted
	}
	return `WITH upd AS (
		UPDATE ` + s.q + `.items i SET state = 'pending', attempt = 0, rate_limit_waits = 0, failed_attempts = 0,
			next_at = $2::timestamptz + ((u.n - 1) * $3::bigint) * interval '1 microsecond',
			ready = (u.n - 1) * $3::bigint <= 0,
			updated_at = $2, lease_owner = '', lease_expires_at = NULL,
			reason_stage = NULL, reason_class = NULL, reason_error = NULL, reason_attempts = NULL, reason_at = NULL,
			reason_fingerprint = NULL
		FROM unnest($1::bigint[]) WITH ORDINALITY AS u(id, n)
		WHERE i.id = u.id AND i.id = ANY($1::bigint[])` + cond + `
		RETURNING i.run_id),
	reopen AS (
		UPDATE ` + s.q + `.runs SET status = 'running', finished_at = NULL, reason = ''
		WHERE id IN (SELECT run_id FROM upd))
	SELECT count(*) FROM upd`
}

// Purge deletes the dead items selected by f, and canceled ones when
// f.States names that state, with their attempts, and counts them as purged
// in their runs. It returns how many items it deleted.
func (s *Store) Purge(ctx context.Context, f redrive.ItemFilter) (int, error) {
	f, err := withStates("purge", f, redrive.StateDead, redrive.StateDead, redrive.StateCanceled)
	if err != nil {
		return 0, err
	}
	counted, err := s.countsFailures(ctx)
	if err != nil {
		return 0, s.fail("purge", err)
	}
	var a args
	if f.Limit <= 0 && len(f.IDs) == 0 {
		// Everything the filter selects: no selection of IDs to find again,
		// so one statement, which sends no IDs through this process (a
		// million dead items: 24.5 s instead of 28.5 s, and 55 MB less
		// here). A row redriven meanwhile is rechecked and kept.
		var n int64
		err = s.pool.QueryRow(ctx, s.purgeSQL(s.itemWhere(f, &a), counted), a...).Scan(&n)
		if err != nil {
			return 0, s.fail("purge", err)
		}
		return int(n), nil
	}
	sel := s.selectIDsSQL(f, "FOR UPDATE", &a)
	n, err := s.writeLocked(ctx, sel, a, false, func(tx pgx.Tx, ids []int64) (n int64, err error) {
		err = tx.QueryRow(ctx, s.purgeIDsSQL(counted), ids).Scan(&n)
		return n, err
	})
	if err != nil {
		return 0, s.fail("purge", err)
	}
	return n, nil
}

// purgeSQL is Purge's delete of every item that where selects, with its
// attempts and audit marks, counted as purged in its run (see
// purgeIDsSQL); it returns how many items it deleted.
func (s *Store) purgeSQL(where string, counted bool) string {
	return `WITH d AS (DELETE FROM ` + s.q + `.items WHERE ` + where + countedCond(counted) + ` RETURNING ` + removedCols("") + `),` +
		s.purgeRest(counted)
}

// purgeIDsSQL is Purge's delete of the locked items $1 with their attempts
// and audit marks; it returns how many items it deleted. The runs keep
// counting the purged items: the delete trigger takes them off their
// state's count in run_counts, and the same statement adds them under
// 'purged'.
func (s *Store) purgeIDsSQL(counted bool) string {
	return `WITH d AS (DELETE FROM ` + s.q + `.items i USING unnest($1::bigint[]) AS u(id)
		WHERE i.id = u.id AND i.id = ANY($1::bigint[])` + countedCond(counted) + ` RETURNING ` + removedCols("i.") + `),` +
		s.purgeRest(counted)
}

// countedCond is the condition that a delete of items (a purge's,
// retention's of finished runs) carries: with counted (see
// countsFailures), failuresCounted.
func countedCond(counted bool) string {
	if counted {
		return ` AND ` + failuresCounted
	}
	return ``
}

// removedCols are the columns a delete of items returns: what removedRest
// needs (id, run_id) and what itemFailuresGone reads.
func removedCols(p string) string {
	return p + `id, ` + p + `run_id, ` + p + `pipeline, ` + p + `stage, ` + p + `reason_class, ` +
		p + `reason_fingerprint, ` + p + `state`
}

// purgeRest ends a purge's statement whose WITH query d returns the
// removedCols of each item it deleted: it deletes their attempts and audit
// marks, counts them as purged in their runs and selects their number
// (see removedRest).
func (s *Store) purgeRest(counted bool) string { return s.removedRest(counted, true) }

// removedRest ends a statement whose WITH query d deletes items and
// returns their removedCols: it deletes their attempts and audit marks,
// with purged counts them as purged in their runs, and selects their
// number. With counted (see countsFailures) it also takes the items and
// their failed attempts off their failure groups, one row per group, and
// the triggers skip them.
func (s *Store) removedRest(counted, purged bool) string {
	attempts, rest := ``, ``
	if counted {
		attempts = ` AND ` + failuresCounted + ` RETURNING pipeline, stage, class, fingerprint, run_id`
		rest = `,
	` + s.itemFailuresGone("d") + `,
	` + s.attemptFailuresGone("da")
	}
	if purged {
		rest = `,
	pc AS (INSERT INTO ` + s.q + `.run_counts (run_id, state, n) SELECT run_id, 'purged', count(*) FROM d GROUP BY run_id)` + rest
	}
	return `
	da AS (DELETE FROM ` + s.q + `.attempts WHERE item_id = ANY(ARRAY(SELECT id FROM d))` + attempts + `),
	dm AS (DELETE FROM ` + s.q + `.action_items WHERE item_id = ANY(ARRAY(SELECT id FROM d)))` + rest + `
	SELECT count(*) FROM d`
}
