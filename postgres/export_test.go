package postgres

import (
	"context"
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
		sql, a := s.claimSQL(req)
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
