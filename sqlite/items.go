package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redrive/redrive"
)

const itemCols = `id, run_id, pipeline, key, stage, stage_index, state, priority, attempt, rate_limit_waits,
	payload, input, enqueued_at, next_at, lease_token, lease_owner, lease_expires_at, updated_at,
	reason_stage, reason_class, reason_error, reason_attempts, reason_at,
	failed_attempts, order_at, attempt_started_at, lease_losses, traceparent, tracestate`

// scanItem scans itemCols and returns the item and its lease token.
func scanItem(sc interface{ Scan(...any) error }) (redrive.Item, int64, error) {
	return newItemScanner().scan(sc)
}

// itemScanner scans rows of itemCols into items. A claim scans all its
// rows with one, so that the scan targets an item does not hold are
// allocated once: as a function's variables, each escaped to the heap on
// its own, a dozen allocations per row.
type itemScanner struct {
	it                     redrive.Item
	key, owner             sql.NullString
	state                  string
	enq, next, upd, token  int64
	order                  sql.NullInt64
	leaseExp, rAt          sql.NullInt64
	rStage, rClass, rError sql.NullString
	rAttempts              sql.NullInt64
	started                sql.NullInt64
	tp, ts                 sql.NullString
	dest                   []any
}

func newItemScanner() *itemScanner {
	s := &itemScanner{}
	s.dest = []any{&s.it.ID, &s.it.RunID, &s.it.Pipeline, &s.key, &s.it.Stage, &s.it.StageIndex, &s.state, &s.it.Priority,
		&s.it.Attempt, &s.it.RateLimitWaits, &s.it.Payload, &s.it.Input, &s.enq, &s.next, &s.token, &s.owner, &s.leaseExp, &s.upd,
		&s.rStage, &s.rClass, &s.rError, &s.rAttempts, &s.rAt,
		&s.it.FailedAttempts, &s.order, &s.started, &s.it.LeaseLosses, &s.tp, &s.ts}
	return s
}

// scan scans one row of itemCols (claimCols for a claim's scanner).
func (s *itemScanner) scan(sc interface{ Scan(...any) error }) (redrive.Item, int64, error) {
	s.it = redrive.Item{}
	if err := sc.Scan(s.dest...); err != nil {
		return redrive.Item{}, 0, err
	}
	it := s.it
	it.TraceParent, it.TraceState = s.tp.String, s.ts.String
	if it.State = redrive.State(s.state); it.State == redrive.StateRunning {
		it.AttemptStartedAt = nt(s.started)
	}
	it.Key = s.key.String
	it.EnqueuedAt = ntz(s.enq)
	it.OrderAt = it.EnqueuedAt
	if s.order.Valid {
		it.OrderAt = ntz(s.order.Int64)
	}
	it.NextAt = ntz(s.next)
	it.LeaseOwner = s.owner.String
	it.LeaseExpiresAt = nt(s.leaseExp)
	it.UpdatedAt = ntz(s.upd)
	if s.rClass.Valid {
		it.Reason = &redrive.Reason{Stage: s.rStage.String, Class: s.rClass.String, Error: s.rError.String,
			Attempts: int(s.rAttempts.Int64), At: nt(s.rAt)}
	}
	return it, s.token, nil
}

// claimCols are the columns a claim returns: those of itemCols that the
// claim's own values do not already give. A claimed item is running, leased
// to the claim's owner until its LeaseUntil, updated and started at its Now
// and StartedAt, and carries no reason (only dead and canceled items do).
const claimCols = `id, run_id, pipeline, key, stage, stage_index, priority, attempt, rate_limit_waits,
	payload, input, enqueued_at, next_at, lease_token, failed_attempts, order_at, lease_losses,
	traceparent, tracestate`

// newClaimScanner returns a scanner of claimCols rows that fills in the
// rest of each item from req, as the claim wrote it.
func newClaimScanner(req redrive.ClaimRequest) *itemScanner {
	// The claim binds the lease's expiry and its update time as integers
	// (zero for a zero time) and its start as NULL when zero; the scanner
	// reads them back as the item's columns would.
	s := &itemScanner{state: string(redrive.StateRunning),
		owner:    sql.NullString{String: req.Owner, Valid: true},
		leaseExp: sql.NullInt64{Int64: tnz(req.LeaseUntil), Valid: true},
		upd:      tnz(req.Now)}
	if started := tnz(req.StartedAt); started != 0 {
		s.started = sql.NullInt64{Int64: started, Valid: true}
	}
	s.dest = []any{&s.it.ID, &s.it.RunID, &s.it.Pipeline, &s.key, &s.it.Stage, &s.it.StageIndex, &s.it.Priority,
		&s.it.Attempt, &s.it.RateLimitWaits, &s.it.Payload, &s.it.Input, &s.enq, &s.next, &s.token,
		&s.it.FailedAttempts, &s.order, &s.it.LeaseLosses, &s.tp, &s.ts}
	return s
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func blob(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// Enqueue adds items to a run in one transaction. An item whose key exists
// in the pipeline is returned with the existing ID and Existing true. The
// run must exist (else the error wraps redrive.ErrNotFound) and be a run of
// req.Pipeline.
func (s *Store) Enqueue(ctx context.Context, req redrive.EnqueueRequest) ([]redrive.Enqueued, error) {
	if req.Pipeline == "" || req.Stage == "" {
		return nil, errors.New("sqlite: enqueue: pipeline and stage are required")
	}
	if len(req.Items) == 0 {
		return nil, nil
	}
	out := make([]redrive.Enqueued, len(req.Items))
	now := tnz(req.Now)
	insStmt, err := s.stmts.get(ctx, `INSERT INTO items (run_id, pipeline, key, stage, stage_index, state,
		priority, payload, input, enqueued_at, next_at, updated_at, order_at, ready,
		reason_stage, reason_class, reason_error, reason_attempts, reason_at, reason_fingerprint, callback,
		traceparent, tracestate)
		VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT DO NOTHING`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: enqueue: %w", err)
	}
	findStmt, err := s.stmts.get(ctx, `SELECT id FROM items WHERE pipeline = ? AND key = ?`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: enqueue: %w", err)
	}
	err = s.writeTx(ctx, "enqueue", func(tx *sql.Tx) error {
		var pipeline string
		err := tx.QueryRowContext(ctx, `SELECT pipeline FROM runs WHERE id = ?`, req.RunID).Scan(&pipeline)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: enqueue: run %d: %w", req.RunID, redrive.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if pipeline != req.Pipeline {
			return fmt.Errorf("sqlite: enqueue: run %d is a run of pipeline %q, not %q", req.RunID, pipeline, req.Pipeline)
		}
		ins := tx.StmtContext(ctx, insStmt)
		find := tx.StmtContext(ctx, findStmt)
		for i, it := range req.Items {
			state := redrive.StatePending
			orderAt := now
			if !it.OrderAt.IsZero() {
				orderAt = tnz(it.OrderAt)
			}
			var rStage, rClass, rError, rAttempts, rAt, rFP any
			if it.Invalid != "" {
				state = redrive.StateDead
				rStage, rClass, rError, rAttempts, rAt = req.Stage, redrive.ClassInvalidInput, it.Invalid, 0, now
				rFP = redrive.Fingerprint(it.Invalid)
			}
			res, err := ins.ExecContext(ctx, req.RunID, req.Pipeline, nullStr(it.Key), req.Stage, string(state),
				it.Priority, blob(it.Payload), blob(it.Payload), now, now, now, orderAt,
				rStage, rClass, rError, rAttempts, rAt, rFP, nullStr(it.Callback),
				nullStr(it.TraceParent), nullStr(it.TraceState))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			if n == 0 {
				// The key exists (an item without a key never conflicts).
				var id int64
				if err := find.QueryRowContext(ctx, req.Pipeline, it.Key).Scan(&id); err != nil {
					return fmt.Errorf("existing key %q: %w", it.Key, err)
				}
				out[i] = redrive.Enqueued{ID: id, Existing: true}
				continue
			}
			id, err := res.LastInsertId()
			if err != nil {
				return err
			}
			out[i] = redrive.Enqueued{ID: id}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// claimWhere adds the pipeline and stage conditions of a claim request.
func claimWhere(req redrive.ClaimRequest, where []string, args []any) ([]string, []any) {
	where = append(where, "pipeline IN ("+placeholders(len(req.Pipelines))+")")
	for _, p := range req.Pipelines {
		args = append(args, p)
	}
	if len(req.Only) > 0 {
		var or []string
		for _, k := range req.Only {
			or = append(or, "(pipeline = ? AND stage = ?)")
			args = append(args, k.Pipeline, k.Stage)
		}
		where = append(where, "("+strings.Join(or, " OR ")+")")
	}
	for _, k := range req.Exclude {
		where = append(where, "NOT (pipeline = ? AND stage = ?)")
		args = append(args, k.Pipeline, k.Stage)
	}
	return where, args
}

func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// Claim promotes waiting items that have become due, then leases up to
// req.Limit due pending items of req.Pipelines in claim order: priority
// (higher first), then order time, then ID. The leases are returned in that
// order. Each claim increments the item's lease token.
func (s *Store) Claim(ctx context.Context, req redrive.ClaimRequest) ([]redrive.Lease, error) {
	if req.Limit <= 0 || len(req.Pipelines) == 0 {
		return nil, nil
	}
	where, args := claimWhere(req, []string{"state = 'pending'", "ready = 1", "next_at <= ?"}, []any{tnz(req.Now)})
	// The walk of items_ready stops after the batch; next_at is in the
	// index, so a ready item that a clock ahead of this one made ready is
	// skipped without reading its row.
	q := `UPDATE items SET state = 'running', lease_token = lease_token + 1, lease_owner = ?,
		lease_expires_at = ?, updated_at = ?, attempt_started_at = ?
		WHERE id IN (SELECT id FROM items INDEXED BY items_ready WHERE ` + strings.Join(where, " AND ") + `
			ORDER BY priority DESC, order_at, id LIMIT ?)
		RETURNING ` + claimCols
	// A zero StartedAt is NULL: the claim clears the start mark.
	args = append([]any{req.Owner, tnz(req.LeaseUntil), tnz(req.Now), tn(req.StartedAt)}, args...)
	args = append(args, req.Limit)
	leases, err := s.claim(ctx, "claim", q, args, newClaimScanner(req), req.Limit, tnz(req.Now), promoteBatch(req.Limit))
	if err != nil {
		return nil, err
	}
	slices.SortFunc(leases, func(a, b redrive.Lease) int {
		if a.Item.Priority != b.Item.Priority {
			return b.Item.Priority - a.Item.Priority
		}
		if c := a.Item.OrderAt.Compare(b.Item.OrderAt); c != 0 {
			return c
		}
		return int(a.Item.ID - b.Item.ID)
	})
	return leases, nil
}

// promoteBatch is how many waiting items one claim of limit items
// promotes at most: more than it takes, so that promotion outpaces claims
// when a backlog comes due at once, and bounded, so that no claim pays for
// a whole backlog.
func promoteBatch(limit int) int { return max(1000, 4*limit) }

// promoteSQL marks up to ?2 waiting pending items due at ?1 ready, oldest
// next_at first, through items_waiting.
const promoteSQL = `UPDATE items SET ready = 1 WHERE id IN (SELECT id FROM items INDEXED BY items_waiting
	WHERE state = 'pending' AND ready = 0 AND next_at <= ?1 ORDER BY next_at LIMIT ?2)`

// ClaimExpired takes over up to req.Limit running items of req.Pipelines
// whose lease expired before req.Now, oldest lease first, with a new token.
// The item's attempt counter is unchanged: the rescuer records the lost
// attempt with Complete.
func (s *Store) ClaimExpired(ctx context.Context, req redrive.ClaimRequest) ([]redrive.Lease, error) {
	if req.Limit <= 0 || len(req.Pipelines) == 0 {
		return nil, nil
	}
	where, args := claimWhere(req, []string{"state = 'running'", "lease_expires_at < ?"}, []any{tnz(req.Now)})
	q := `UPDATE items SET lease_token = lease_token + 1, lease_owner = ?, lease_expires_at = ?, updated_at = ?
		WHERE id IN (SELECT id FROM items WHERE ` + strings.Join(where, " AND ") + `
			ORDER BY lease_expires_at, id LIMIT ?)
		RETURNING ` + itemCols
	args = append([]any{req.Owner, tnz(req.LeaseUntil), tnz(req.Now)}, args...)
	args = append(args, req.Limit)
	leases, err := s.claim(ctx, "claim expired", q, args, newItemScanner(), req.Limit, 0, 0)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(leases, func(a, b redrive.Lease) int { return int(a.Item.ID - b.Item.ID) })
	return leases, nil
}

// claim runs q, which leases items, in a write transaction, and scans its
// rows with sc; when promote is positive it first promotes up to that many
// waiting items due at now.
func (s *Store) claim(ctx context.Context, op, q string, args []any, sc *itemScanner, limit int, now int64, promote int) ([]redrive.Lease, error) {
	leases := make([]redrive.Lease, 0, limit)
	st, err := s.stmts.get(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	var pst *sql.Stmt
	if promote > 0 {
		if pst, err = s.stmts.get(ctx, promoteSQL); err != nil {
			return nil, fmt.Errorf("sqlite: %s: %w", op, err)
		}
	}
	err = s.writeTx(ctx, op, func(tx *sql.Tx) error {
		if pst != nil {
			if _, err := tx.StmtContext(ctx, pst).ExecContext(ctx, now, promote); err != nil {
				return fmt.Errorf("promote due items: %w", err)
			}
		}
		rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			it, token, err := sc.scan(rows)
			if err != nil {
				return err
			}
			leases = append(leases, redrive.Lease{Item: it, Token: token})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return leases, nil
}

// Heartbeat extends the leases still held to until and returns the IDs of
// the items whose lease was lost.
func (s *Store) Heartbeat(ctx context.Context, leases []redrive.LeaseRef, until time.Time) ([]int64, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	var lost []int64
	err := s.writeTx(ctx, "heartbeat", func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx,
			`UPDATE items SET lease_expires_at = ? WHERE id = ? AND lease_token = ? AND state = 'running'`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, l := range leases {
			res, err := st.ExecContext(ctx, tnz(until), l.ItemID, l.Token)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			if n == 0 {
				lost = append(lost, l.ItemID)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return lost, nil
}

// Release returns leased items to pending, due at now, without recording an
// attempt. Leases no longer held are ignored.
func (s *Store) Release(ctx context.Context, leases []redrive.LeaseRef, now time.Time) error {
	return s.release(ctx, "release", leases, now, 0)
}

// ReleaseUnstarted returns leased items whose attempt never started to
// pending, due at now, without recording an attempt, and counts a lease
// loss on each. Leases no longer held are ignored.
func (s *Store) ReleaseUnstarted(ctx context.Context, leases []redrive.LeaseRef, now time.Time) error {
	return s.release(ctx, "release unstarted", leases, now, 1)
}

func (s *Store) release(ctx context.Context, op string, leases []redrive.LeaseRef, now time.Time, losses int) error {
	if len(leases) == 0 {
		return nil
	}
	return s.writeTx(ctx, op, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, `UPDATE items SET state = 'pending', next_at = ?, ready = 1, updated_at = ?,
			lease_owner = NULL, lease_expires_at = NULL, attempt_started_at = NULL, lease_losses = lease_losses + ?
			WHERE id = ? AND lease_token = ? AND state = 'running'`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, l := range leases {
			if _, err := st.ExecContext(ctx, tnz(now), tnz(now), losses, l.ItemID, l.Token); err != nil {
				return err
			}
		}
		return nil
	})
}

// MarkStarted records the start of the attempts of the leases still held
// and returns the IDs of the items whose lease was lost.
func (s *Store) MarkStarted(ctx context.Context, marks []redrive.StartMark) ([]int64, error) {
	if len(marks) == 0 {
		return nil, nil
	}
	var lost []int64
	err := s.writeTx(ctx, "mark started", func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx,
			`UPDATE items SET attempt_started_at = ? WHERE id = ? AND lease_token = ? AND state = 'running'`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, m := range marks {
			res, err := st.ExecContext(ctx, tnz(m.At), m.Lease.ItemID, m.Lease.Token)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				lost = append(lost, m.Lease.ItemID)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return lost, nil
}

// Complete applies completions in one transaction; applied[i] reports
// whether completion i applied (its token was current and the item running).
// An applied completion records c.Record as an attempt, its ItemID, RunID
// and Pipeline filled from the item when zero.
func (s *Store) Complete(ctx context.Context, cs []redrive.Completion) ([]bool, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	for i, c := range cs {
		switch c.State {
		case redrive.StatePending, redrive.StateSucceeded, redrive.StateDead, redrive.StateCanceled:
		default:
			return nil, fmt.Errorf("sqlite: complete: completion %d (item %d): invalid next state %q", i, c.ItemID, c.State)
		}
	}
	// Prepare the statements first: the write transaction holds the only
	// write connection.
	type chunk struct {
		lo, hi   int
		upd, ins *sql.Stmt // nil: apply one at a time with one1
		success  bool
	}
	var (
		chunks []chunk
		one    [2]*sql.Stmt
	)
	for lo := 0; lo < len(cs); lo += completeChunkSize {
		c := chunk{lo: lo, hi: min(lo+completeChunkSize, len(cs))}
		n := bucket(c.hi - c.lo)
		if hasDuplicate(cs[c.lo:c.hi]) {
			n = 1
		}
		// A chunk of successes alone binds 25 values a completion, not 35
		// (see successOnly).
		c.success = n > 1 && successOnly(cs[c.lo:c.hi])
		upd, err := s.stmts.get(ctx, completeSQL(n, c.success))
		if err != nil {
			return nil, fmt.Errorf("sqlite: complete: %w", err)
		}
		ins, err := s.stmts.get(ctx, attemptsSQL(n, c.success))
		if err != nil {
			return nil, fmt.Errorf("sqlite: complete: %w", err)
		}
		if n == 1 {
			one = [2]*sql.Stmt{upd, ins}
		} else {
			c.upd, c.ins = upd, ins
		}
		chunks = append(chunks, c)
	}
	applied := make([]bool, len(cs))
	err := s.writeTx(ctx, "complete", func(tx *sql.Tx) error {
		for _, c := range chunks {
			if c.upd != nil {
				if err := completeChunk(ctx, tx, c.upd, c.ins, cs[c.lo:c.hi], applied[c.lo:c.hi], c.success); err != nil {
					return err
				}
				continue
			}
			// A chunk naming an item twice is applied one completion at
			// a time, so that the first completion fences the second.
			for i := c.lo; i < c.hi; i++ {
				if err := completeChunk(ctx, tx, one[0], one[1], cs[i:i+1], applied[i:i+1], false); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// completeChunkSize is the most completions one UPDATE statement applies.
const completeChunkSize = 256

// bucket rounds n up to a power of two, so that batch statements come in a
// few sizes that stay prepared.
func bucket(n int) int {
	b := 1
	for b < n {
		b <<= 1
	}
	return b
}

// completeSQL and attemptsSQL build the batch statements for n rows: with
// success, those of chunks that successOnly accepts, which leave out the
// reason, outcome, class, error and fingerprint columns (the full
// statements store NULL reasons and fingerprints and empty classes and
// errors for a success, as these do).
func completeSQL(n int, success bool) string {
	var q strings.Builder
	q.WriteString(`UPDATE items SET state = v.column3, stage = v.column4, stage_index = v.column5,
		attempt = v.column6, rate_limit_waits = v.column7, next_at = COALESCE(v.column8, items.next_at),
		ready = COALESCE(v.column8 <= v.column11, 0),
		payload = CASE WHEN v.column9 THEN v.column10 ELSE items.payload END,
		lease_owner = NULL, lease_expires_at = NULL, updated_at = v.column11, `)
	row := "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	if success {
		q.WriteString(`reason_stage = NULL, reason_class = NULL, reason_error = NULL,
		reason_attempts = NULL, reason_at = NULL, failed_attempts = v.column12, reason_fingerprint = NULL
		FROM (VALUES `)
		row = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	} else {
		q.WriteString(`reason_stage = v.column12, reason_class = v.column13, reason_error = v.column14,
		reason_attempts = v.column15, reason_at = v.column16, failed_attempts = v.column17,
		reason_fingerprint = v.column18
		FROM (VALUES `)
	}
	for i := range n {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(row)
	}
	q.WriteString(`) AS v WHERE items.id = v.column1 AND items.lease_token = v.column2 AND items.state = 'running'
		RETURNING items.id`)
	return q.String()
}

func attemptsSQL(n int, success bool) string {
	var q strings.Builder
	q.WriteString(`INSERT INTO attempts (item_id, run_id, pipeline, stage, stage_index, number, outcome, class,
		error, started_at, finished_at, delay_ns, config_hash, next_stage, next_stage_index, next_input, fingerprint)
		`)
	row := "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	if success {
		q.WriteString(`SELECT column1, column2, column3, column4, column5, column6, 'succeeded', '', '', column7,
			column8, column9, column10, column11, column12, column13, NULL FROM (VALUES `)
		row = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	} else {
		q.WriteString(`SELECT column1, column2, column3, column4, column5, column6, column7, column8, column9, column10,
			column11, column12, column13, column14, column15, column16, column17 FROM (VALUES `)
	}
	for i := range n {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(row)
	}
	q.WriteString(`) WHERE column1 IS NOT NULL`)
	return q.String()
}

// successOnly reports whether every completion of cs is a success that
// the success statements can carry: a succeeded attempt with no class or
// error that leaves its item succeeded or pending (a move to the next
// stage). Their reasons and fingerprints are NULL either way.
func successOnly(cs []redrive.Completion) bool {
	for i := range cs {
		c := &cs[i]
		if c.Record.Outcome != redrive.OutcomeSucceeded || c.Record.Class != "" || c.Record.Error != "" ||
			(c.State != redrive.StateSucceeded && c.State != redrive.StatePending) {
			return false
		}
	}
	return true
}

func hasDuplicate(cs []redrive.Completion) bool {
	seen := make(map[int64]struct{}, len(cs))
	for _, c := range cs {
		if _, dup := seen[c.ItemID]; dup {
			return true
		}
		seen[c.ItemID] = struct{}{}
	}
	return false
}

// completeChunk applies cs, which name distinct items, with one UPDATE ...
// FROM (VALUES ...) statement (upd) and records the attempts of the applied
// ones with one INSERT (ins). Both statements have bucket(len(cs)) rows:
// padding rows match no item and insert nothing, so that a few statement
// sizes stay prepared.
func completeChunk(ctx context.Context, tx *sql.Tx, upd, ins *sql.Stmt, cs []redrive.Completion, applied []bool, success bool) error {
	n := bucket(len(cs))
	args := make([]any, 0, 18*n)
	for _, c := range cs {
		var next any
		if c.State == redrive.StatePending {
			next = tnz(c.NextAt)
		}
		var rStage, rClass, rError, rAttempts, rAt, rFP any
		if c.State == redrive.StateDead || c.State == redrive.StateCanceled {
			r := c.Reason
			if r == nil {
				r = &redrive.Reason{Stage: c.Stage, Class: c.Record.Class, Error: c.Record.Error,
					Attempts: c.Attempt, At: c.Now}
			}
			rStage, rClass, rError, rAttempts, rAt = r.Stage, r.Class, r.Error, r.Attempts, tn(r.At)
			rFP = redrive.Fingerprint(r.Error)
		}
		replace := 0
		if c.Payload != nil {
			replace = 1
		}
		if success {
			args = append(args, c.ItemID, c.Token, string(c.State), c.Stage, c.StageIndex, c.Attempt, c.RateLimitWaits,
				next, replace, blob(c.Payload), tnz(c.Now), c.FailedAttempts)
			continue
		}
		args = append(args, c.ItemID, c.Token, string(c.State), c.Stage, c.StageIndex, c.Attempt, c.RateLimitWaits,
			next, replace, blob(c.Payload), tnz(c.Now), rStage, rClass, rError, rAttempts, rAt, c.FailedAttempts, rFP)
	}
	for range n - len(cs) {
		if success {
			args = append(args, 0, 0, "", "", 0, 0, 0, nil, 0, nil, 0, 0)
			continue
		}
		args = append(args, 0, 0, "", "", 0, 0, 0, nil, 0, nil, 0, nil, nil, nil, nil, nil, 0, nil)
	}
	rows, err := tx.StmtContext(ctx, upd).QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	done := make(map[int64]bool, len(cs))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		done[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(done) == 0 {
		return nil
	}
	args = args[:0]
	for i, c := range cs {
		if !done[c.ItemID] {
			continue
		}
		applied[i] = true
		a := c.Record
		if a.ItemID == 0 {
			a.ItemID = c.ItemID
		}
		if a.RunID == 0 || a.Pipeline == "" {
			// The engine names both; a caller that leaves them out has
			// them read from the item, apart from the batch's statement.
			var run int64
			var pipeline string
			if err := tx.QueryRowContext(ctx, `SELECT run_id, pipeline FROM items WHERE id = ?`, c.ItemID).Scan(&run, &pipeline); err != nil {
				return fmt.Errorf("read a completed item's run: %w", err)
			}
			a.RunID = cmp.Or(a.RunID, run)
			a.Pipeline = cmp.Or(a.Pipeline, pipeline)
		}
		// A completion that moves the item on a stage keeps that stage's
		// input, the item's new payload, on its attempt (see migration 0010).
		var nextStage, nextIndex, nextInput any
		if c.StageIndex > a.StageIndex {
			in := c.Payload
			if in == nil {
				// The move kept the payload; rare enough to read apart.
				if err := tx.QueryRowContext(ctx, `SELECT payload FROM items WHERE id = ?`, c.ItemID).Scan(&in); err != nil {
					return fmt.Errorf("read a moved item's input: %w", err)
				}
			}
			nextStage, nextIndex, nextInput = c.Stage, c.StageIndex, blob(in)
		}
		if success {
			args = append(args, a.ItemID, a.RunID, a.Pipeline, a.Stage, a.StageIndex, a.Number,
				tn(a.StartedAt), tn(a.FinishedAt), int64(a.Delay), a.ConfigHash, nextStage, nextIndex, nextInput)
			continue
		}
		args = append(args, a.ItemID, a.RunID, a.Pipeline, a.Stage, a.StageIndex, a.Number, string(a.Outcome),
			a.Class, a.Error, tn(a.StartedAt), tn(a.FinishedAt), int64(a.Delay), a.ConfigHash,
			nextStage, nextIndex, nextInput, attemptFingerprint(a))
	}
	for range n - len(done) {
		if success {
			args = append(args, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil)
			continue
		}
		args = append(args, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil)
	}
	if _, err := tx.StmtContext(ctx, ins).ExecContext(ctx, args...); err != nil {
		return fmt.Errorf("record attempts: %w", err)
	}
	return nil
}

// attemptFingerprint is the fingerprint stored with a failed attempt, NULL
// for a success: the console groups failures only, and the success path
// pays for no fingerprint.
func attemptFingerprint(a redrive.Attempt) any {
	if a.Outcome == redrive.OutcomeSucceeded {
		return nil
	}
	return redrive.Fingerprint(a.Error)
}
