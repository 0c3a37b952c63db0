package postgres

import (
	"context"
	"sync/atomic"
	"time"
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

// failureCounting remembers which of the migrations that let statements
// count their own failures the schema has: a migration is never
// unapplied, so once seen it is not asked again. A completion asks again
// at most once a minute while its migration is missing, so that a process
// ahead of its schema does not pay a query per batch.
type failureCounting struct {
	applied, onCompletion atomic.Bool
	askedCompletion       atomic.Int64 // when onCompletion was last found missing, in Unix nanoseconds
}

// countsFailures reports whether the schema has migration 0027, so that a
// bulk action may count its failures by group (failuresCounted). A process
// ahead of its schema (Options.Migrate off, `redrive migrate up` not yet
// run) leaves the counting to the triggers.
func (s *Store) countsFailures(ctx context.Context) (bool, error) {
	if s.failures.applied.Load() {
		return true, nil
	}
	ok, err := s.hasMigration(ctx, failuresCountedMigration)
	if ok {
		s.failures.applied.Store(true)
	}
	return ok, err
}

// completionsCountedMigration is the migration whose attempts trigger
// skips a transaction that set redrive.failures_counted, so that a
// completion may count its failures by group.
const completionsCountedMigration = 28

// countsCompletionFailures reports whether a completion may count the
// failures it records by group (see completeFullSQL): whether the schema
// has migration 0028, as last asked. Any error reads as no, which leaves
// the counting to the triggers.
func (s *Store) countsCompletionFailures(ctx context.Context) bool {
	f := &s.failures
	if f.onCompletion.Load() {
		return true
	}
	now := time.Now().UnixNano()
	if asked := f.askedCompletion.Load(); asked != 0 && now-asked < int64(time.Minute) {
		return false
	}
	ok, err := s.hasMigration(ctx, completionsCountedMigration)
	if err != nil || !ok {
		f.askedCompletion.Store(now)
		return false
	}
	f.onCompletion.Store(true)
	return true
}

// hasMigration reports whether the schema records migration version.
func (s *Store) hasMigration(ctx context.Context, version int) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+s.q+`.schema_migrations WHERE version = $1)`,
		version).Scan(&ok)
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

// attemptFailuresCome is a WITH query (named fa) of a completion whose
// WITH query rows returns the a_pipeline, a_stage, a_class, a_fp and a_run
// of the attempts it inserts: it adds the failed ones (those with a
// fingerprint) to their groups' counts, one row per group, as
// attempts_failure_count would one row per attempt.
func (s *Store) attemptFailuresCome(rows string) string {
	return `fa AS (INSERT INTO ` + s.q + `.failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
		SELECT a_pipeline, a_stage, a_class, a_fp, a_run, 'failed', count(*)
		FROM ` + rows + ` WHERE a_fp IS NOT NULL GROUP BY 1, 2, 3, 4, 5)`
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
