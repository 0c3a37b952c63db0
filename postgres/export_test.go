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
// (priority, orderAt, id), and returns the shared buffers each read.
func ClaimBuffers(ctx context.Context, s *Store, req redrive.ClaimRequest, priority int, orderAt time.Time, id int64) (head, resumed int, err error) {
	run := func(from *readyKey) (int, error) {
		var n int
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
			plan, _ := plans[0][0]["Plan"].(map[string]any)
			hit, _ := plan["Shared Hit Blocks"].(float64)
			read, _ := plan["Shared Read Blocks"].(float64)
			n = int(hit + read)
			return errRollback
		})
		if errors.Is(err, errRollback) {
			err = nil
		}
		return n, err
	}
	if head, err = run(nil); err != nil {
		return 0, 0, err
	}
	resumed, err = run(&readyKey{priority, orderAt.Truncate(time.Microsecond), id})
	return head, resumed, err
}

var errRollback = errors.New("roll back")

// WaitVacuum waits for the VACUUM the store runs in the background, if
// any, to end.
func WaitVacuum(ctx context.Context, s *Store) error { return s.waitVacuum(ctx) }

// RetentionPlan returns the plan of DeleteSucceeded's statement, planned
// as DeleteSucceeded plans it, for a batch of limit items before before.
func RetentionPlan(ctx context.Context, s *Store, before time.Time, limit int) (string, error) {
	var plan string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, retainSettings); err != nil {
			return err
		}
		var err error
		plan, err = explainLines(ctx, tx, `EXPLAIN `+s.deleteSucceededSQL(), before, time.Time{}, int64(limit))
		return err
	})
	return plan, err
}
