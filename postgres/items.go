package postgres

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// itemCols are the columns scanItem reads, in order.
const itemCols = `id, run_id, pipeline, coalesce(key, ''), stage, stage_index, state, priority,
	attempt, rate_limit_waits, payload, input, enqueued_at, next_at, lease_owner,
	lease_expires_at, updated_at, reason_stage, reason_class, reason_error,
	reason_attempts, reason_at, lease_token,
	failed_attempts, order_at, attempt_started_at, lease_losses, traceparent, tracestate`

// scanItem reads the columns of itemCols.
func scanItem(row pgx.Row) (redrive.Item, int64, error) {
	var (
		it                         redrive.Item
		state                      string
		leaseExp, rAt              *time.Time
		rStage, rClass, rErr       *string
		rAttempts                  *int32
		stageIndex, prio, att, rlw int32
		failed                     int32
		token                      int64
		started                    *time.Time
		losses                     int32
		tp, ts                     *string
	)
	err := row.Scan(&it.ID, &it.RunID, &it.Pipeline, &it.Key, &it.Stage, &stageIndex, &state, &prio,
		&att, &rlw, &it.Payload, &it.Input, &it.EnqueuedAt, &it.NextAt, &it.LeaseOwner,
		&leaseExp, &it.UpdatedAt, &rStage, &rClass, &rErr, &rAttempts, &rAt, &token,
		&failed, &it.OrderAt, &started, &losses, &tp, &ts)
	if err != nil {
		return it, 0, err
	}
	it.TraceParent, it.TraceState = deref(tp), deref(ts)
	it.State = redrive.State(state)
	it.LeaseLosses = int(losses)
	if started != nil && it.State == redrive.StateRunning {
		it.AttemptStartedAt = started.UTC()
	}
	it.StageIndex, it.Priority, it.Attempt, it.RateLimitWaits = int(stageIndex), int(prio), int(att), int(rlw)
	it.FailedAttempts = int(failed)
	it.EnqueuedAt = it.EnqueuedAt.UTC()
	it.OrderAt = it.OrderAt.UTC()
	it.NextAt = it.NextAt.UTC()
	it.UpdatedAt = it.UpdatedAt.UTC()
	if leaseExp != nil {
		it.LeaseExpiresAt = leaseExp.UTC()
	}
	if rClass != nil {
		r := &redrive.Reason{Stage: deref(rStage), Class: *rClass, Error: deref(rErr)}
		if rAttempts != nil {
			r.Attempts = int(*rAttempts)
		}
		if rAt != nil {
			r.At = rAt.UTC()
		}
		it.Reason = r
	}
	return it, token, nil
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
const reachedAt = `(CASE WHEN state IN ('dead', 'canceled') THEN coalesce(reason_at, updated_at) ELSE updated_at END)`

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
	if len(f.States) == 1 {
		conds = append(conds, "state = "+a.add(string(f.States[0])))
	} else if len(f.States) > 1 {
		conds = append(conds, "state = ANY("+a.add(statesText(f.States))+"::text[])")
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
		conds = append(conds, reachedAt+" >= "+a.add(f.Since))
	}
	if !f.Until.IsZero() {
		conds = append(conds, reachedAt+" < "+a.add(f.Until))
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

func statesText(ss []redrive.State) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
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
