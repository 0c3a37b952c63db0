package postgres

import (
	"context"
	"sync/atomic"
)

// The bulk actions that add or remove failures (Purge, Redrive,
// RedriveFrom, CancelPending) write their failure_counts rows themselves, one per group, and tell the row
// triggers to skip them (migration 0027): the triggers cost a function
// call and an inserted row per dead item and per failed attempt, half of
// a purge of a million dead items.

// failuresCountedMigration is the migration whose triggers skip a
// transaction that set redrive.failures_counted.
const failuresCountedMigration = 27

// failuresCounted is the condition that tells the failure-count triggers
// that the statement writes its own failure_counts rows (see migration
// 0027): a constant subquery, evaluated once before the statement's first
// row, that is always true. Only statements built when countsFailures
// said yes may carry it: against a schema without 0027 the triggers would
// count the same rows again.
const failuresCounted = `(SELECT set_config('redrive.failures_counted', 'on', true)) = 'on'`

// failureCounting remembers that the schema has migration 0027; a
// migration is never unapplied, so once seen it is not asked again.
type failureCounting struct{ applied atomic.Bool }

// countsFailures reports whether the schema has migration 0027, so that a
// bulk action may count its failures by group (failuresCounted). A process
// ahead of its schema (Options.Migrate off, `redrive migrate up` not yet
// run) leaves the counting to the triggers.
func (s *Store) countsFailures(ctx context.Context) (bool, error) {
	if s.failures.applied.Load() {
		return true, nil
	}
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+s.q+`.schema_migrations WHERE version = $1)`,
		failuresCountedMigration).Scan(&ok)
	if ok {
		s.failures.applied.Store(true)
	}
	return ok, err
}

// itemFailuresGone is a WITH query (named fi) of a statement whose WITH
// query rows returns the pipeline, stage, reason_class,
// reason_fingerprint, run_id and state of the items it removes from the
// dead or canceled state: it takes them off their groups' counts, one row
// per group, as items_failure_count would one row per item.
func (s *Store) itemFailuresGone(rows string) string { return s.itemFailures(rows, "-") }

// itemFailuresCome is itemFailuresGone for items a statement puts in the
// dead or canceled state (rows returns their new values): it adds them to
// their groups' counts.
func (s *Store) itemFailuresCome(rows string) string { return s.itemFailures(rows, "") }

func (s *Store) itemFailures(rows, sign string) string {
	return `fi AS (INSERT INTO ` + s.q + `.failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
		SELECT pipeline, stage, coalesce(reason_class, ''), coalesce(reason_fingerprint, ''), run_id, state, ` + sign + `count(*)
		FROM ` + rows + ` WHERE state IN ('dead', 'canceled') GROUP BY 1, 2, 3, 4, 5, 6)`
}

// attemptFailuresGone is a WITH query (named fa) of a statement whose
// WITH query rows returns the pipeline, stage, class, fingerprint and
// run_id of the attempts it deletes: it takes the failed ones off their
// groups' counts, one row per group, as attempts_failure_count would one
// row per attempt.
func (s *Store) attemptFailuresGone(rows string) string {
	return `fa AS (INSERT INTO ` + s.q + `.failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
		SELECT pipeline, stage, class, fingerprint, run_id, 'failed', -count(*)
		FROM ` + rows + ` WHERE fingerprint IS NOT NULL GROUP BY 1, 2, 3, 4, 5)`
}
