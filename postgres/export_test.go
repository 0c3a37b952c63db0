package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// ClaimPlans returns the plans of the two statements of a claim of req,
// planned as Claim plans them (with planSettings, unless bare).
func ClaimPlans(ctx context.Context, s *Store, req redrive.ClaimRequest, bare bool) (promote, claim string, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if !bare {
			if _, err := tx.Exec(ctx, planSettings); err != nil {
				return err
			}
		}
		explain := func(sql string, a ...any) (string, error) {
			rows, err := tx.Query(ctx, `EXPLAIN `+sql, a...)
			if err != nil {
				return "", err
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			return strings.Join(lines, "\n"), err
		}
		if promote, err = explain(s.promoteSQL(), req.Now, promoteBatch(req.Limit)); err != nil {
			return err
		}
		sql, a := s.claimSQL(req, nil)
		claim, err = explain(sql, a...)
		return err
	})
	return promote, claim, err
}

// OldestDueRead is OldestDue reading at most limit ready items in claim
// order; exact reports that it did not stop at the limit.
func OldestDueRead(ctx context.Context, s *Store, now time.Time, limit int) (time.Time, bool, error) {
	return s.oldestDue(ctx, now, limit)
}

// SamplesPlan returns the generic plan of the read of group g's newest dead
// items under the dead-state filter, planned as FailureGroups plans it: the
// plan a cached statement settles on after a few runs, which cannot rely
// on the arguments' values.
func SamplesPlan(ctx context.Context, s *Store, g redrive.ErrorGroup) (string, error) {
	var ia, aa args
	f := redrive.ItemFilter{States: []redrive.State{redrive.StateDead}}
	q, a := s.examplesSQL(g, s.itemWhere(f, &ia), ia, attemptWhere(f, &aa), aa)
	var plan string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, planSettings); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `PREPARE samples AS `+q); err != nil {
			return err
		}
		// EXECUTE takes its arguments as literals.
		ps := make([]string, len(a))
		for i, v := range a {
			switch v := v.(type) {
			case string:
				ps[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
			case int:
				ps[i] = fmt.Sprint(v)
			default:
				return fmt.Errorf("argument %d: %T", i+1, v)
			}
		}
		rows, err := tx.Query(ctx, `EXPLAIN EXECUTE samples(`+strings.Join(ps, ", ")+`)`)
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		plan = strings.Join(lines, "\n")
		if _, derr := tx.Exec(ctx, `DEALLOCATE samples`); err == nil {
			err = derr
		}
		return err
	})
	return plan, err
}

// ClaimBuffers runs the claim statement of req in a transaction it rolls
// back, once from the head of items_ready and once resuming at the item
// (priority, orderAt, id), and returns the shared buffers each one's walk
// read (the subquery that picks and locks the rows, without the update of
// them, whose index entries and triggers read what they read wherever
// the walk started) and each one's plan as it ran, one node a line (see
// planNodes).
func ClaimBuffers(ctx context.Context, s *Store, req redrive.ClaimRequest, priority int, orderAt time.Time, id int64) (head, resumed int, headPlan, resumedPlan string, err error) {
	run := func(from *readyKey) (int, string, error) {
		var n int
		var plan string
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, planSettings); err != nil {
				return err
			}
			sql, a := s.claimSQL(req, from)
			rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+sql, a...)
			if err != nil {
				return err
			}
			plans, err := pgx.CollectRows(rows, pgx.RowTo[[]map[string]any])
			if err != nil {
				return err
			}
			if len(plans) != 1 || len(plans[0]) != 1 {
				return fmt.Errorf("unexpected EXPLAIN output %v", plans)
			}
			top, _ := plans[0][0]["Plan"].(map[string]any)
			n = walkBlocks(top)
			var b strings.Builder
			planNodes(&b, top, 0)
			plan = b.String()
			return errRollback
		})
		if errors.Is(err, errRollback) {
			err = nil
		}
		return n, plan, err
	}
	if head, headPlan, err = run(nil); err != nil {
		return 0, 0, "", "", err
	}
	resumed, resumedPlan, err = run(&readyKey{priority, orderAt.Truncate(time.Microsecond), id})
	return head, resumed, headPlan, resumedPlan, err
}

// blocks is the shared buffers a node of an EXPLAIN (ANALYZE, BUFFERS)
// plan read, its children's included.
func blocks(node map[string]any) int {
	hit, _ := node["Shared Hit Blocks"].(float64)
	read, _ := node["Shared Read Blocks"].(float64)
	return int(hit + read)
}

// walkBlocks is the shared buffers that a claim's walk, which picks the
// rows to update, read.
func walkBlocks(top map[string]any) int {
	// The claim's UPDATE of items, under the CTE that records its batch
	// (leasebatches.go); its walk is an InitPlan of it, beside the one
	// that reads the batch's ID.
	upd := findNode(top, func(n map[string]any) bool {
		return n["Node Type"] == "ModifyTable" && n["Relation Name"] == "items"
	})
	if upd == nil {
		return 0
	}
	var n int
	children, _ := upd["Plans"].([]any)
	for _, c := range children {
		if c, ok := c.(map[string]any); ok && c["Parent Relationship"] == "InitPlan" && c["Node Type"] != "CTE Scan" {
			n += blocks(c)
		}
	}
	return n
}

// findNode returns the first node of a plan, depth first, that match
// accepts.
func findNode(node map[string]any, match func(map[string]any) bool) map[string]any {
	if match(node) {
		return node
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		if c, ok := c.(map[string]any); ok {
			if n := findNode(c, match); n != nil {
				return n
			}
		}
	}
	return nil
}

// planNodes writes node and its children, one a line: its type, what it
// reads, the rows it returned over its loops and the buffers it read.
func planNodes(b *strings.Builder, node map[string]any, depth int) {
	b.WriteString(strings.Repeat("  ", depth))
	fmt.Fprint(b, node["Node Type"])
	for _, k := range []string{"Subplan Name", "CTE Name", "Index Name", "Relation Name"} {
		if v, ok := node[k].(string); ok {
			fmt.Fprintf(b, " %s=%s", k, v)
		}
	}
	rows, _ := node["Actual Rows"].(float64)
	loops, _ := node["Actual Loops"].(float64)
	fmt.Fprintf(b, " rows=%.0f loops=%.0f buffers=%d\n", rows, loops, blocks(node))
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		if c, ok := c.(map[string]any); ok {
			planNodes(b, c, depth+1)
		}
	}
}

var errRollback = errors.New("roll back")

// WaitVacuum waits for the VACUUM the store runs in the background, if
// any, to end.
func WaitVacuum(ctx context.Context, s *Store) error { return s.waitVacuum(ctx) }

// WaitSideVacuum waits for the VACUUMs of the counts tables and the outbox
// that s runs in the background, if any.
func WaitSideVacuum(ctx context.Context, s *Store) error { return s.waitSideVacuum(ctx) }

// VacuumSide asks s for another pass of its VACUUMs of the counts tables,
// of the outbox or both, as a fold or retention does.
func VacuumSide(s *Store, counts, outbox bool) { s.vacuumSide(counts, outbox, false) }

// OutboxVacuumEvery is how many delivered notifications retention deletes
// between two VACUUMs of the outbox.
const OutboxVacuumEvery = outboxVacuumEvery

// CountsVacuumEvery is how many Complete calls pass between two VACUUMs of
// the counts tables.
const CountsVacuumEvery = countsVacuumEvery

// RetentionPlan returns the plan of DeleteSucceeded's statement, planned
// as DeleteSucceeded plans it, for a batch of limit items before before.
func RetentionPlan(ctx context.Context, s *Store, before time.Time, limit int) (string, error) {
	var plan string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, retainSettings); err != nil {
			return err
		}
		var err error
		plan, err = explainLines(ctx, tx, `EXPLAIN `+s.deleteSucceededSQL(true), before, time.Time{}, int64(limit))
		return err
	})
	return plan, err
}

// LeaseWritePlans runs, in a transaction it rolls back, each statement that
// writes the items of leases (Complete's for cs, then the heartbeat's,
// release's and start mark's for the leases of cs) under EXPLAIN ANALYZE,
// with the settings the store plans it with, and returns the plans by
// name.
func LeaseWritePlans(ctx context.Context, s *Store, cs []redrive.Completion) (map[string]string, error) {
	plans := map[string]string{}
	explain := func(name, settings, sql string, args ...any) error {
		return explainAnalyzed(ctx, s, plans, name, settings, sql, args...)
	}
	b, _, groups := s.completeBatch(ctx, cs)
	names := []string{"complete success", "complete full"}
	if len(b.QueuedQueries) == 2 && b.QueuedQueries[1].SQL == s.completeFullSQL(groups >= 0) {
		names = names[1:]
	}
	for i, q := range b.QueuedQueries[1:] {
		if err := explain(names[i], completePlan, q.SQL, q.Arguments...); err != nil && !errors.Is(err, errRollback) {
			return nil, err
		}
	}
	ids, tokens := make([]int64, len(cs)), make([]int64, len(cs))
	ats := make([]time.Time, len(cs))
	for i, c := range cs {
		ids[i], tokens[i], ats[i] = c.ItemID, c.Token, c.Now
	}
	for _, st := range []struct {
		name, sql string
		args      []any
	}{
		{"heartbeat", s.heartbeatSQL(), []any{ids, tokens, time.Now().Add(time.Hour)}},
		{"release", s.releaseSQL(), []any{ids, tokens, time.Now(), s.channel, 0}},
		{"mark started", s.markStartedSQL(), []any{ids, tokens, ats}},
	} {
		if err := explain(st.name, leasePlan, st.sql, st.args...); err != nil && !errors.Is(err, errRollback) {
			return nil, err
		}
	}
	return plans, nil
}

// FinishedRunsPlans returns the plans of DeleteFinishedRuns's two
// statements, planned as it plans them.
func FinishedRunsPlans(ctx context.Context, s *Store, before time.Time, limit int) (items, runs string, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, finishedRunsSettings); err != nil {
			return err
		}
		sql, a := s.deleteFinishedItemsSQL(before, limit, true)
		if items, err = explainLines(ctx, tx, `EXPLAIN `+sql, a...); err != nil {
			return err
		}
		runs, err = explainLines(ctx, tx, `EXPLAIN `+s.deleteFinishedRunsSQL(), before)
		return err
	})
	return items, runs, err
}

// explainAnalyzed runs sql under EXPLAIN ANALYZE, after settings (if any),
// in a transaction it rolls back, and stores the plan in plans[name]. It
// returns errRollback when the statement ran.
func explainAnalyzed(ctx context.Context, s *Store, plans map[string]string, name, settings, sql string, args ...any) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if settings != "" {
			if _, err := tx.Exec(ctx, settings); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS off, TIMING off) `+sql, args...)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		plans[name] = strings.Join(lines, "\n")
		if err != nil {
			return err
		}
		return errRollback
	})
}

// LockingWritePlans runs, each in a transaction it rolls back and with the
// settings the store plans it with, the statements that walk an index to
// lock the items they then write, under EXPLAIN ANALYZE: the promotion of
// the items due at now (a claim's batch of 2,000), ClaimExpired's for
// expired, and DeleteSucceeded's for a batch of 2,000 items updated before
// before. It returns the plans by name.
func LockingWritePlans(ctx context.Context, s *Store, now time.Time, expired redrive.ClaimRequest, before time.Time) (map[string]string, error) {
	plans := map[string]string{}
	claimExpired, a := s.claimExpiredSQL(expired)
	for _, st := range []struct {
		name, settings, sql string
		args                []any
	}{
		{"promote", claimSettings, s.promoteSQL(), []any{now, promoteBatch(2000)}},
		{"claim expired", claimExpiredPlan, claimExpired, a},
		{"delete succeeded", retainSettings, s.deleteSucceededSQL(true), []any{before, time.Time{}, int64(2000)}},
	} {
		if err := explainAnalyzed(ctx, s, plans, st.name, st.settings, st.sql, st.args...); err != nil && !errors.Is(err, errRollback) {
			return nil, err
		}
	}
	return plans, nil
}

// NotificationClaimPlan runs ClaimNotifications' statement for req under
// EXPLAIN ANALYZE, with the settings the store plans it with, in a
// transaction it rolls back, and returns the plan.
func NotificationClaimPlan(ctx context.Context, s *Store, req redrive.ClaimRequest) (string, error) {
	plans := map[string]string{}
	sql, a := s.claimNotificationsSQL(req)
	if err := explainAnalyzed(ctx, s, plans, "claim notifications", notificationClaimPlan, sql, a...); err != nil && !errors.Is(err, errRollback) {
		return "", err
	}
	return plans["claim notifications"], nil
}

// BulkWritePlans runs the writes of the operators' bulk actions under
// EXPLAIN ANALYZE, each in a transaction it rolls back and with the
// settings the store plans it with: RetryNow's and CancelPending's of the
// pending items waiting, Redrive's, RedriveFrom's (to the first stage) and
// Purge's of the dead items dead. It returns the plans by name.
func BulkWritePlans(ctx context.Context, s *Store, waiting, dead []int64, now time.Time) (map[string]string, error) {
	plans := map[string]string{}
	cancel, ca := s.cancelIDsSQL(waiting, redrive.Reason{Class: "canceled", Error: "by an operator", At: now}, true)
	idx, keep := make([]int32, len(dead)), make([]bool, len(dead))
	for _, st := range []struct {
		name, sql string
		args      []any
	}{
		{"retry now", s.retryNowIDsSQL(), []any{waiting, now}},
		{"cancel pending", cancel, ca},
		{"redrive", s.redriveIDsSQL(true), []any{dead, now, int64(1000)}},
		{"redrive from", s.redriveFromIDsSQL(true), []any{dead, idx, keep, "a", now, int64(0)}},
		{"purge", s.purgeIDsSQL(true), []any{dead}},
	} {
		if err := explainAnalyzed(ctx, s, plans, st.name, bulkPlan, st.sql, st.args...); err != nil && !errors.Is(err, errRollback) {
			return nil, err
		}
	}
	return plans, nil
}

// NotificationRedrivePlan runs RedriveNotifications' write of the
// notifications ids under EXPLAIN ANALYZE, with the settings the store
// plans it with, in a transaction it rolls back, and returns the plan.
func NotificationRedrivePlan(ctx context.Context, s *Store, ids []int64, now time.Time) (string, error) {
	plans := map[string]string{}
	if err := explainAnalyzed(ctx, s, plans, "redrive notifications", bulkPlan, s.redriveNotificationsIDsSQL(), ids, now); err != nil && !errors.Is(err, errRollback) {
		return "", err
	}
	return plans["redrive notifications"], nil
}

// NotificationSettlePlan runs SettleNotifications' statement for
// deliveries of the notifications ids (their tokens tokens) under EXPLAIN
// ANALYZE, with the settings the store plans it with, in a transaction it
// rolls back, and returns the plan.
func NotificationSettlePlan(ctx context.Context, s *Store, ids, tokens []int64, now time.Time) (string, error) {
	plans := map[string]string{}
	n := len(ids)
	statuses, errs := make([]string, n), make([]string, n)
	counts := make([]int32, n)
	times := make([]time.Time, n)
	for i := range n {
		statuses[i], counts[i], times[i] = string(redrive.NotificationDelivered), 1, now
	}
	if err := explainAnalyzed(ctx, s, plans, "settle", completePlan, s.settleNotificationsSQL(),
		ids, tokens, statuses, counts, make([]int32, n), times, errs, times); err != nil && !errors.Is(err, errRollback) {
		return "", err
	}
	return plans["settle"], nil
}

// DeleteDeliveredPlan runs DeleteDelivered's statement for a batch of
// limit notifications delivered before before under EXPLAIN ANALYZE, with
// the settings the store plans it with, in a transaction it rolls back,
// and returns the plan.
func DeleteDeliveredPlan(ctx context.Context, s *Store, before time.Time, limit int) (string, error) {
	plans := map[string]string{}
	if err := explainAnalyzed(ctx, s, plans, "delete delivered", retainSettings, s.deleteDeliveredSQL(), before, limit); err != nil && !errors.Is(err, errRollback) {
		return "", err
	}
	return plans["delete delivered"], nil
}

// SetCountsRecheck sets how long after a read of error groups measured
// failure_counts the next read of s measures it again (countsRecheck by
// default).
func SetCountsRecheck(s *Store, d time.Duration) { s.side.recheck = d }
