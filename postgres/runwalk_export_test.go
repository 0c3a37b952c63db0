package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// ListItemsPlan returns the plan ListItems(f) runs with, as EXPLAIN ANALYZE
// shows it, and with generic set the generic plan (the one a cached
// statement settles on after a few runs, blind to the arguments' values).
func ListItemsPlan(ctx context.Context, s *Store, f redrive.ItemFilter, generic bool) (string, error) {
	if f.Limit == 0 {
		f.Limit = 100
	}
	q, a, settings, err := s.listItemsSQL(ctx, f)
	if err != nil {
		return "", err
	}
	var plan string
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if settings != "" {
			if _, err := tx.Exec(ctx, settings); err != nil {
				return err
			}
		}
		explain := `EXPLAIN ANALYZE ` + q
		if generic {
			if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
				return err
			}
			// A prepared statement outlives the transaction: a name of
			// its own, removed after.
			name := fmt.Sprintf("list_items_%d", time.Now().UnixNano())
			if _, err := tx.Exec(ctx, `PREPARE `+name+` AS `+q); err != nil {
				return err
			}
			defer tx.Exec(ctx, `DEALLOCATE `+name)
			// EXECUTE takes its arguments as literals.
			ps := make([]string, len(a))
			for i, v := range a {
				switch v := v.(type) {
				case string:
					ps[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
				case int, int64:
					ps[i] = fmt.Sprint(v)
				default:
					return fmt.Errorf("argument %d: %T", i+1, v)
				}
			}
			explain, a = `EXPLAIN ANALYZE EXECUTE `+name, nil
			if len(ps) > 0 {
				explain += `(` + strings.Join(ps, ", ") + `)`
			}
		}
		var err error
		plan, err = explainLines(ctx, tx, explain, a...)
		return err
	})
	return plan, err
}

// explainLines runs an EXPLAIN statement in tx and returns its plan, one
// line of the result a line.
func explainLines(ctx context.Context, tx pgx.Tx, explain string, a ...any) (string, error) {
	rows, err := tx.Query(ctx, explain, a...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}
