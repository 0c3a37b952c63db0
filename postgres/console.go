package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/keptcounts"
)

// DeadErrors counts the dead (or f.States) items selected by f by
// pipeline, stage, class and exact error.
func (s *Store) DeadErrors(ctx context.Context, f redrive.ItemFilter) ([]redrive.ErrorCount, error) {
	f.AfterID, f.Limit = 0, 0
	if len(f.States) == 0 {
		f.States = []redrive.State{redrive.StateDead}
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("postgres: dead errors: %w", err)
	}
	var a args
	where := s.itemWhere(f, &a)
	rows, err := s.pool.Query(ctx, `SELECT pipeline, stage, COALESCE(reason_class, ''), COALESCE(reason_error, ''), count(*) AS n
		FROM `+s.q+`.items WHERE `+where+` GROUP BY 1, 2, 3, 4 ORDER BY n DESC, 1, 2, 3, 4`, a...)
	if err != nil {
		return nil, s.fail("dead errors", err)
	}
	out, err := scanErrorCounts(rows)
	if err != nil {
		return nil, s.fail("dead errors", err)
	}
	return out, nil
}

// AttemptErrors counts the failed attempts of f's run, pipeline and stage
// by pipeline, stage, class and exact error.
func (s *Store) AttemptErrors(ctx context.Context, f redrive.ItemFilter) ([]redrive.ErrorCount, error) {
	var a args
	where := "outcome <> 'succeeded'"
	if f.RunID != 0 {
		// attempts has no index on run_id: the run's items lead to them.
		run := a.add(f.RunID)
		where += " AND run_id = " + run + " AND item_id IN (SELECT id FROM " + s.q + ".items WHERE run_id = " + run + ")"
	}
	if f.Pipeline != "" {
		where += " AND pipeline = " + a.add(f.Pipeline)
	}
	if f.Stage != "" {
		where += " AND stage = " + a.add(f.Stage)
	}
	if f.Class != "" {
		where += " AND class = " + a.add(f.Class)
	}
	if f.ErrorContains != "" {
		where += " AND strpos(lower(error), lower(" + a.add(f.ErrorContains) + ")) > 0"
	}
	rows, err := s.pool.Query(ctx, `SELECT pipeline, stage, class, error, count(*) AS n
		FROM `+s.q+`.attempts WHERE `+where+` GROUP BY 1, 2, 3, 4 ORDER BY n DESC, 1, 2, 3, 4`, a...)
	if err != nil {
		return nil, s.fail("attempt errors", err)
	}
	out, err := scanErrorCounts(rows)
	if err != nil {
		return nil, s.fail("attempt errors", err)
	}
	return out, nil
}

// scanErrorCounts reads rows of pipeline, stage, class, error and count.
func scanErrorCounts(rows pgx.Rows) ([]redrive.ErrorCount, error) {
	defer rows.Close()
	var out []redrive.ErrorCount
	for rows.Next() {
		var e redrive.ErrorCount
		var n int64
		if err := rows.Scan(&e.Pipeline, &e.Stage, &e.Class, &e.Error, &n); err != nil {
			return nil, err
		}
		e.Count = int(n)
		out = append(out, e)
	}
	return out, rows.Err()
}

// FailureGroups groups the failures selected by f by pipeline, stage,
// class and stored fingerprint (see redrive.Console). A filter of run,
// pipeline, stage, class, fingerprint and the dead and canceled states
// only sums the counts kept at write time (failure_counts, migration
// 0015); any other filter (error text, time, IDs, other states) groups
// the items_cause and attempts_cause indexes. Either way one bounded read
// then fetches the newest failures of each of the first
// redrive.ExampleGroups groups.
func (s *Store) FailureGroups(ctx context.Context, f redrive.ItemFilter) ([]redrive.ErrorGroup, error) {
	f.AfterID, f.Limit = 0, 0
	if len(f.States) == 0 {
		f.States = []redrive.State{redrive.StateDead}
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("postgres: failure groups: %w", err)
	}
	var ia, aa args
	itemW := s.itemWhere(f, &ia)
	attW := attemptWhere(f, &aa)
	var groups []redrive.ErrorGroup
	var err error
	if keptcounts.Groups(f) {
		groups, err = s.keptFailureCounts(ctx, f)
	} else {
		groups, err = s.groupFailures(ctx, itemW, ia, attW, aa)
	}
	if err != nil {
		return nil, s.fail("failure groups", err)
	}
	redrive.RankErrorGroups(groups)
	for i := range groups[:min(len(groups), redrive.ExampleGroups)] {
		g := &groups[i]
		q, a := s.examplesSQL(*g, itemW, ia, attW, aa)
		samples, err := s.examples(ctx, g.Dead > 0, q, a)
		if err != nil {
			return nil, s.fail("failure groups: examples", err)
		}
		g.SetExamples(samples)
	}
	return groups, nil
}

// examplesSQL returns the read of group g's newest failures: its dead
// items selected by itemW (arguments ia) when it has any, else its failed
// attempts selected by attW (arguments aa).
func (s *Store) examplesSQL(g redrive.ErrorGroup, itemW string, ia args, attW string, aa args) (string, args) {
	var a args
	if g.Dead > 0 {
		// A group's dead count comes from items_cause, which holds dead
		// and canceled items: the literal states let every plan, generic
		// ones too, use it (see examples).
		a = append(a, ia...)
		return `SELECT id, coalesce(reason_error, '') FROM ` + s.q + `.items WHERE ` + itemW +
			` AND state IN ('dead', 'canceled') AND reason_fingerprint = ` + a.add(g.Fingerprint) + ` AND pipeline = ` + a.add(g.Pipeline) +
			` AND stage = ` + a.add(g.Stage) + ` AND reason_class = ` + a.add(g.Class) +
			` ORDER BY id DESC LIMIT ` + a.add(redrive.ErrorSamples), a
	}
	a = append(a, aa...)
	return `SELECT item_id, error FROM ` + s.q + `.attempts WHERE ` + attW +
		` AND fingerprint = ` + a.add(g.Fingerprint) + ` AND pipeline = ` + a.add(g.Pipeline) +
		` AND stage = ` + a.add(g.Stage) + ` AND class = ` + a.add(g.Class) +
		` ORDER BY id DESC LIMIT ` + a.add(redrive.ErrorSamples), a
}

// examples runs q, a read of a group's newest failures as (item ID, error)
// rows. A read of dead items runs with sorts and bitmap scans
// off, in one implicit transaction as a claim does (see claimOrdered), so
// that the only plan left walks items_cause backwards from the group's
// newest item and stops after the samples. Left to its statistics, none
// yet after a surge of deaths, the planner chose items_dlq and filtered
// the pipeline's whole class: 650 ms per group at 1,000,000 dead items,
// and 10 s for the console's error groups, instead of under 1 ms.
func (s *Store) examples(ctx context.Context, dead bool, q string, a args) ([]redrive.ErrorSample, error) {
	var rows pgx.Rows
	var err error
	if dead {
		b := &pgx.Batch{}
		b.Queue(planSettings)
		b.Queue(q, a...)
		br := s.pool.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
		rows, err = br.Query()
	} else {
		rows, err = s.pool.Query(ctx, q, a...)
	}
	if err != nil {
		return nil, err
	}
	var samples []redrive.ErrorSample
	var e redrive.ErrorSample
	if _, err := pgx.ForEachRow(rows, []any{&e.ItemID, &e.Error}, func() error {
		samples = append(samples, e)
		return nil
	}); err != nil {
		return nil, err
	}
	return samples, nil
}

// groupFailures counts the dead items selected by itemW and the failed
// attempts selected by attW by cause, from the items_cause and
// attempts_cause indexes.
func (s *Store) groupFailures(ctx context.Context, itemW string, ia args, attW string, aa args) ([]redrive.ErrorGroup, error) {
	// The two grouped reads are independent: they run at once, on two
	// connections.
	var dead []causeCount
	var deadErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		dead, deadErr = s.causeCounts(ctx, `SELECT pipeline, stage, coalesce(reason_class, ''), coalesce(reason_fingerprint, ''), count(*)
			FROM `+s.q+`.items WHERE `+itemW+` GROUP BY pipeline, stage, reason_class, reason_fingerprint`, ia)
	}()
	failed, err := s.causeCounts(ctx, `SELECT pipeline, stage, class, fingerprint, count(*)
		FROM `+s.q+`.attempts WHERE `+attW+` GROUP BY pipeline, stage, class, fingerprint`, aa)
	<-done
	if err == nil {
		err = deadErr
	}
	if err != nil {
		return nil, err
	}
	return mergeCauses(dead, failed), nil
}

// foldFailuresAt is how many failure_counts rows a read may sum before it
// folds them (see foldFailures): a few thousand rows sum in a
// millisecond or two.
const foldFailuresAt = 4096

// keptFailureCounts sums the failure_counts rows that f selects (see
// keptcounts.Groups): its states' items and every failed attempt of its
// run, pipeline, stage, class and fingerprint. When it summed more than
// foldFailuresAt rows, it folds the table before it returns, so the next
// read sums one row per group, and starts a VACUUM of the table.
func (s *Store) keptFailureCounts(ctx context.Context, f redrive.ItemFilter) ([]redrive.ErrorGroup, error) {
	s.checkCounts(ctx)
	var a args
	where := failureCountsWhere(f, true, &a)
	rows, err := s.pool.Query(ctx, `SELECT pipeline, stage, class, fingerprint,
			sum(n) FILTER (WHERE kind <> 'failed'), sum(n) FILTER (WHERE kind = 'failed'), count(*)
		FROM `+s.q+`.failure_counts WHERE `+where+`
		GROUP BY pipeline, stage, class, fingerprint`, a...)
	if err != nil {
		return nil, err
	}
	var groups []redrive.ErrorGroup
	var g redrive.ErrorGroup
	var dead, failed *int64
	var n, read int64
	if _, err := pgx.ForEachRow(rows, []any{&g.Pipeline, &g.Stage, &g.Class, &g.Fingerprint, &dead, &failed, &n}, func() error {
		read += n
		g.Dead, g.Failures = 0, 0
		if dead != nil {
			g.Dead = int(*dead)
		}
		if failed != nil {
			g.Failures = int(*failed)
		}
		if g.Dead > 0 || g.Failures > 0 {
			groups = append(groups, g)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if read > foldFailuresAt {
		if n, err := s.foldFailures(ctx); err == nil && n > 0 {
			s.vacuumCounts()
		}
	}
	return groups, nil
}

// failureCountsWhere selects the rows of failure_counts of f's states
// (and failed attempts, with failed) of its run, pipeline, stage, class
// and fingerprint.
func failureCountsWhere(f redrive.ItemFilter, failed bool, a *args) string {
	kinds := make([]string, 0, len(f.States)+1)
	for _, st := range f.States {
		kinds = append(kinds, string(st))
	}
	if failed {
		kinds = append(kinds, "failed")
	}
	where := "kind = ANY(" + a.add(kinds) + "::text[])"
	for _, c := range []struct{ col, v string }{
		{"pipeline", f.Pipeline}, {"stage", f.Stage}, {"class", f.Class}, {"fingerprint", f.Fingerprint},
	} {
		if c.v != "" {
			where += " AND " + c.col + " = " + a.add(c.v)
		}
	}
	if f.RunID != 0 {
		where += " AND run_id = " + a.add(f.RunID)
	}
	return where
}

// keptCount is Count of a filter that keptcounts.Count serves: the sum of its rows of
// failure_counts, which the transactions that kill, cancel, redrive,
// purge or delete items keep exact, at most f.Limit when it is set.
// Counting the items read every one of them: 200 – 290 ms for the dead
// items of a pipeline, or all of them, at a million (docs/BENCHMARKS.md).
func (s *Store) keptCount(ctx context.Context, f redrive.ItemFilter) (int, error) {
	s.checkCounts(ctx)
	var a args
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0)::bigint FROM `+s.q+`.failure_counts WHERE `+
		failureCountsWhere(f, false, &a), a...).Scan(&n)
	if err != nil {
		return 0, err
	}
	if f.Limit > 0 && n > int64(f.Limit) {
		n = int64(f.Limit)
	}
	return int(n), nil
}

// foldFailures replaces the rows of failure_counts with one per group
// holding their sum (groups at zero go), in one statement, so readers see
// either the rows or their sums; rows that triggers add meanwhile are not
// seen by it and stay. Only one process folds at a time (the others
// skip); a failure only leaves the rows for the next read. It returns how
// many rows it deleted, each a dead row until a VACUUM (sidevacuum.go).
func (s *Store) foldFailures(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `WITH l AS (SELECT pg_try_advisory_xact_lock($1, hashtext($2)) AS ok),
	d AS (DELETE FROM `+s.q+`.failure_counts WHERE (SELECT ok FROM l) RETURNING *),
	ins AS (INSERT INTO `+s.q+`.failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
		SELECT pipeline, stage, class, fingerprint, run_id, kind, sum(n) FROM d
		GROUP BY pipeline, stage, class, fingerprint, run_id, kind HAVING sum(n) <> 0)
	SELECT count(*) FROM d`,
		foldLockClass, s.schema+".failure_counts").Scan(&n)
	return n, err
}

// attemptWhere selects the failed attempts of f's run, pipeline, stage and
// class whose error contains f.ErrorContains and whose fingerprint is
// f.Fingerprint (when set). A stored fingerprint marks a failed attempt:
// successes have none.
func attemptWhere(f redrive.ItemFilter, a *args) string {
	where := "fingerprint IS NOT NULL"
	for _, c := range []struct{ col, v string }{
		{"pipeline", f.Pipeline}, {"stage", f.Stage}, {"class", f.Class}, {"fingerprint", f.Fingerprint},
	} {
		if c.v != "" {
			where += " AND " + c.col + " = " + a.add(c.v)
		}
	}
	if f.RunID != 0 {
		where += " AND run_id = " + a.add(f.RunID)
	}
	if f.ErrorContains != "" {
		where += " AND strpos(lower(error), lower(" + a.add(f.ErrorContains) + ")) > 0"
	}
	return where
}

// causeCount is how many failures of one pipeline, stage, class and
// fingerprint a grouped read counted.
type causeCount struct {
	pipeline, stage, class, fp string
	n                          int64
}

func (s *Store) causeCounts(ctx context.Context, q string, a args) ([]causeCount, error) {
	rows, err := s.pool.Query(ctx, q, a...)
	if err != nil {
		return nil, err
	}
	var out []causeCount
	var c causeCount
	_, err = pgx.ForEachRow(rows, []any{&c.pipeline, &c.stage, &c.class, &c.fp, &c.n}, func() error {
		out = append(out, c)
		return nil
	})
	return out, err
}

// mergeCauses makes the groups of dead and failed counts (a NULL class and
// an empty one are one class).
func mergeCauses(dead, failed []causeCount) []redrive.ErrorGroup {
	type key struct{ p, s, c, fp string }
	idx := map[key]int{}
	var groups []redrive.ErrorGroup
	for j, cs := range [][]causeCount{dead, failed} {
		for _, c := range cs {
			k := key{c.pipeline, c.stage, c.class, c.fp}
			i, ok := idx[k]
			if !ok {
				i = len(groups)
				idx[k] = i
				groups = append(groups, redrive.ErrorGroup{Pipeline: k.p, Stage: k.s, Class: k.c, Fingerprint: k.fp})
			}
			if j == 0 {
				groups[i].Dead += int(c.n)
			} else {
				groups[i].Failures += int(c.n)
			}
		}
	}
	return groups
}
