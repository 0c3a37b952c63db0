package postgres

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/redrive/redrive"
)

// itemCols are the columns an itemScanner reads, in order.
func (s *Store) itemCols() string { return itemColsWith(s.updatedExpr()) }

// itemColsWith is itemCols with updated as the item's updated_at: a
// statement that leases items returns its own time there, when their
// leases began (see updatedExpr).
func itemColsWith(updated string) string {
	return `id, run_id, pipeline, coalesce(key, ''), stage, stage_index, state, priority,
	attempt, rate_limit_waits, payload, input, enqueued_at, next_at, lease_owner,
	lease_expires_at, ` + updated + `, reason_stage, reason_class, reason_error,
	reason_attempts, reason_at, lease_token,
	failed_attempts, order_at, attempt_started_at, lease_losses, traceparent, tracestate`
}

// claimCols are the columns a claim returns: those of itemCols that the
// claim's own values do not already give. A claimed item is running,
// leased to the claim's owner until its LeaseUntil, updated and started
// at its Now and StartedAt, and carries no reason (only dead and canceled
// items do).
const claimCols = `id, run_id, pipeline, coalesce(key, ''), stage, stage_index, priority,
	attempt, rate_limit_waits, payload, input, enqueued_at, next_at, lease_token,
	failed_attempts, order_at, lease_losses, traceparent, tracestate`

// itemScanner reads rows of itemCols into items. A claim reads all its rows
// with one, so that a row costs the item's own strings and bytes and
// nothing more: the scan targets that an item does not hold are the
// scanner's, allocated once (each escaped to the heap on its own, a dozen
// allocations per row, when they were a function's variables), and the
// names that items share (pipeline, stage, state, lease owner) are read
// as the driver's bytes and kept once.
type itemScanner struct {
	it                         redrive.Item
	pipeline, stage, state     pgtype.DriverBytes
	owner                      pgtype.DriverBytes
	leaseExp, rAt, started     pgtype.Timestamptz
	rStage, rClass, rErr       pgtype.Text
	tp, ts                     pgtype.Text
	rAttempts                  pgtype.Int4
	stageIndex, prio, att, rlw int32
	failed, losses             int32
	token                      int64
	// claim: the rows are claimCols, the state and update time the
	// claim's own (claimedAt).
	claim     bool
	claimedAt time.Time
	dest      []any
	names     map[string]string
}

// maxNames bounds an itemScanner's kept names: a read of many pipelines,
// stages or owners starts over rather than growing without end.
const maxNames = 256

func newItemScanner() *itemScanner {
	s := &itemScanner{}
	s.dest = []any{&s.it.ID, &s.it.RunID, &s.pipeline, &s.it.Key, &s.stage, &s.stageIndex, &s.state, &s.prio,
		&s.att, &s.rlw, &s.it.Payload, &s.it.Input, &s.it.EnqueuedAt, &s.it.NextAt, &s.owner,
		&s.leaseExp, &s.it.UpdatedAt, &s.rStage, &s.rClass, &s.rErr, &s.rAttempts, &s.rAt, &s.token,
		&s.failed, &s.it.OrderAt, &s.started, &s.losses, &s.tp, &s.ts}
	return s
}

// newClaimScanner returns a scanner of claimCols rows that fills in the
// rest of each item from req, as the claim wrote it: times as the server
// stores them, to the microsecond.
func newClaimScanner(req redrive.ClaimRequest) *itemScanner {
	s := &itemScanner{claim: true, owner: pgtype.DriverBytes(req.Owner),
		leaseExp:  pgtype.Timestamptz{Time: req.LeaseUntil.Truncate(time.Microsecond), Valid: true},
		claimedAt: req.Now.Truncate(time.Microsecond)}
	if !req.StartedAt.IsZero() {
		s.started = pgtype.Timestamptz{Time: req.StartedAt.Truncate(time.Microsecond), Valid: true}
	}
	s.dest = []any{&s.it.ID, &s.it.RunID, &s.pipeline, &s.it.Key, &s.stage, &s.stageIndex, &s.prio,
		&s.att, &s.rlw, &s.it.Payload, &s.it.Input, &s.it.EnqueuedAt, &s.it.NextAt, &s.token,
		&s.failed, &s.it.OrderAt, &s.losses, &s.tp, &s.ts}
	return s
}

// name returns b as a string, the same string for the same bytes.
func (s *itemScanner) name(b []byte) string {
	if n, ok := s.names[string(b)]; ok {
		return n
	}
	if s.names == nil || len(s.names) >= maxNames {
		s.names = make(map[string]string)
	}
	n := string(b)
	s.names[n] = n
	return n
}

// scan reads the row's columns of itemCols and returns the item and its
// lease token.
func (s *itemScanner) scan(row pgx.Row) (redrive.Item, int64, error) {
	s.it = redrive.Item{}
	if err := row.Scan(s.dest...); err != nil {
		return redrive.Item{}, 0, err
	}
	it := s.it
	it.Pipeline, it.Stage, it.LeaseOwner = s.name(s.pipeline), s.name(s.stage), s.name(s.owner)
	if s.claim {
		it.State, it.UpdatedAt = redrive.StateRunning, s.claimedAt
	} else {
		it.State = redrive.State(s.name(s.state))
	}
	if it.State == redrive.StatePending && s.leaseExp.Valid {
		it.State = redrive.StateRunning // leasestate.go
	}
	it.TraceParent, it.TraceState = s.tp.String, s.ts.String
	it.LeaseLosses = int(s.losses)
	if s.started.Valid && it.State == redrive.StateRunning {
		it.AttemptStartedAt = s.started.Time.UTC()
	}
	it.StageIndex, it.Priority, it.Attempt, it.RateLimitWaits = int(s.stageIndex), int(s.prio), int(s.att), int(s.rlw)
	it.FailedAttempts = int(s.failed)
	it.EnqueuedAt = it.EnqueuedAt.UTC()
	it.OrderAt = it.OrderAt.UTC()
	it.NextAt = it.NextAt.UTC()
	it.UpdatedAt = it.UpdatedAt.UTC()
	if s.leaseExp.Valid {
		it.LeaseExpiresAt = s.leaseExp.Time.UTC()
	}
	if s.rClass.Valid {
		r := &redrive.Reason{Stage: s.rStage.String, Class: s.rClass.String, Error: s.rErr.String}
		if s.rAttempts.Valid {
			r.Attempts = int(s.rAttempts.Int32)
		}
		if s.rAt.Valid {
			r.At = s.rAt.Time.UTC()
		}
		it.Reason = r
	}
	return it, s.token, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// args collects query parameters and hands out their placeholders.
type args []any

func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// reachedAt is the time an item reached its state, as ItemFilter.Since and
// Until bound it.
func (s *Store) reachedAt() string {
	return `(CASE WHEN state IN ('dead', 'canceled') THEN coalesce(reason_at, updated_at) ELSE ` + s.updatedExpr() + ` END)`
}

// itemWhere returns the conditions selecting f (without WHERE), always at
// least "true". Since is inclusive, Until exclusive. Limit is left to the
// caller.
func (s *Store) itemWhere(f redrive.ItemFilter, a *args) string {
	conds := []string{"true"}
	if f.RunID != 0 {
		conds = append(conds, "run_id = "+a.add(f.RunID))
	}
	if f.Pipeline != "" {
		conds = append(conds, "pipeline = "+a.add(f.Pipeline))
	}
	if f.Stage != "" {
		conds = append(conds, "stage = "+a.add(f.Stage))
	}
	if len(f.States) > 0 {
		conds = append(conds, s.statesCond(a, f.States))
	}
	if f.Key != "" {
		conds = append(conds, "key = "+a.add(f.Key))
	}
	if !f.DueAfter.IsZero() {
		conds = append(conds, "next_at > "+a.add(f.DueAfter))
	}
	if f.Class != "" {
		conds = append(conds, "reason_class = "+a.add(f.Class))
	}
	if f.ErrorContains != "" {
		conds = append(conds, "strpos(lower(reason_error), lower("+a.add(f.ErrorContains)+")) > 0")
	}
	if f.Fingerprint != "" {
		conds = append(conds, "reason_fingerprint = "+a.add(f.Fingerprint))
	}
	if !f.Since.IsZero() {
		conds = append(conds, s.reachedAt()+" >= "+a.add(f.Since))
	}
	if !f.Until.IsZero() {
		conds = append(conds, s.reachedAt()+" < "+a.add(f.Until))
	}
	if f.AfterID > 0 {
		conds = append(conds, "id > "+a.add(f.AfterID))
	}
	if len(f.IDs) > 0 {
		conds = append(conds, "id = ANY("+a.add(f.IDs)+"::bigint[])")
	}
	if f.ActionID != 0 {
		// Through action_items_action (migration 0020): one index range.
		conds = append(conds, "id IN (SELECT item_id FROM "+s.q+".action_items WHERE action_id = "+a.add(f.ActionID)+")")
	}
	return strings.Join(conds, " AND ")
}

// withStates returns f limited to allowed states: f.States when each is
// allowed, def when f.States is empty, an error otherwise.
func withStates(op string, f redrive.ItemFilter, def redrive.State, allowed ...redrive.State) (redrive.ItemFilter, error) {
	if err := f.Validate(); err != nil {
		return f, fmt.Errorf("postgres: %s: %w", op, err)
	}
	if len(f.States) == 0 {
		f.States = []redrive.State{def}
		return f, nil
	}
	for _, st := range f.States {
		if !slices.Contains(allowed, st) {
			return f, fmt.Errorf("postgres: %s: state %q not allowed here", op, st)
		}
	}
	return f, nil
}

func limitClause(a *args, n int) string {
	if n > 0 {
		return " LIMIT " + a.add(n)
	}
	return ""
}
