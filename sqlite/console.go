package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

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
		return nil, fmt.Errorf("sqlite: dead errors: %w", err)
	}
	where, args := itemWhere(f)
	rows, err := s.r.QueryContext(ctx, `SELECT pipeline, stage, COALESCE(reason_class, ''), COALESCE(reason_error, ''), COUNT(*) AS n
		FROM items WHERE `+where+` GROUP BY 1, 2, 3, 4 ORDER BY n DESC, 1, 2, 3, 4`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: dead errors: %w", err)
	}
	out, err := scanErrorCounts(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: dead errors: %w", err)
	}
	return out, nil
}

// AttemptErrors counts the failed attempts of f's run, pipeline and stage
// by pipeline, stage, class and exact error.
func (s *Store) AttemptErrors(ctx context.Context, f redrive.ItemFilter) ([]redrive.ErrorCount, error) {
	where := []string{"outcome <> 'succeeded'"}
	var args []any
	if f.RunID != 0 {
		where = append(where, "item_id IN (SELECT id FROM items WHERE run_id = ?)")
		args = append(args, f.RunID)
	}
	if f.Pipeline != "" {
		where = append(where, "pipeline = ?")
		args = append(args, f.Pipeline)
	}
	if f.Stage != "" {
		where = append(where, "stage = ?")
		args = append(args, f.Stage)
	}
	if f.Class != "" {
		where = append(where, "class = ?")
		args = append(args, f.Class)
	}
	if f.ErrorContains != "" {
		where = append(where, "instr(lower(error), lower(?)) > 0")
		args = append(args, f.ErrorContains)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT pipeline, stage, class, error, COUNT(*) AS n
		FROM attempts WHERE `+strings.Join(where, " AND ")+` GROUP BY 1, 2, 3, 4 ORDER BY n DESC, 1, 2, 3, 4`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: attempt errors: %w", err)
	}
	out, err := scanErrorCounts(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: attempt errors: %w", err)
	}
	return out, nil
}

// scanErrorCounts reads and closes rows of pipeline, stage, class, error
// and count.
func scanErrorCounts(rows *sql.Rows) ([]redrive.ErrorCount, error) {
	defer rows.Close()
	var out []redrive.ErrorCount
	for rows.Next() {
		var e redrive.ErrorCount
		if err := rows.Scan(&e.Pipeline, &e.Stage, &e.Class, &e.Error, &e.Count); err != nil {
			return nil, err
		}
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
		return nil, fmt.Errorf("sqlite: failure groups: %w", err)
	}
	itemW, itemArgs := itemWhere(f)
	attW, attArgs := attemptWhere(f)
	var groups []redrive.ErrorGroup
	var err error
	if keptcounts.Groups(f) {
		groups, err = s.keptFailureCounts(ctx, f)
	} else {
		groups, err = s.groupFailures(ctx, itemW, itemArgs, attW, attArgs)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: failure groups: %w", err)
	}
	redrive.RankErrorGroups(groups)
	for i := range groups[:min(len(groups), redrive.ExampleGroups)] {
		g := &groups[i]
		var q string
		var args []any
		if g.Dead > 0 {
			q = `SELECT id, COALESCE(reason_error, '') FROM items WHERE reason_fingerprint = ? AND pipeline = ? AND stage = ?
				AND COALESCE(reason_class, '') = ? AND ` + itemW + ` ORDER BY id DESC LIMIT ?`
			args = append([]any{g.Fingerprint, g.Pipeline, g.Stage, g.Class}, itemArgs...)
		} else {
			q = `SELECT item_id, error FROM attempts WHERE fingerprint = ? AND pipeline = ? AND stage = ? AND class = ?
				AND ` + attW + ` ORDER BY id DESC LIMIT ?`
			args = append([]any{g.Fingerprint, g.Pipeline, g.Stage, g.Class}, attArgs...)
		}
		rows, err := s.r.QueryContext(ctx, q, append(args, redrive.ErrorSamples)...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: failure groups: examples: %w", err)
		}
		var samples []redrive.ErrorSample
		for rows.Next() {
			var e redrive.ErrorSample
			if err := rows.Scan(&e.ItemID, &e.Error); err != nil {
				rows.Close()
				return nil, fmt.Errorf("sqlite: failure groups: examples: %w", err)
			}
			samples = append(samples, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("sqlite: failure groups: examples: %w", err)
		}
		g.SetExamples(samples)
	}
	return groups, nil
}

// groupFailures counts the dead items selected by itemW and the failed
// attempts selected by attW by cause, from the items_cause and
// attempts_cause indexes.
func (s *Store) groupFailures(ctx context.Context, itemW string, itemArgs []any, attW string, attArgs []any) ([]redrive.ErrorGroup, error) {
	// The two grouped reads are independent: they run at once, on two
	// read connections.
	var dead []causeCount
	var deadErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		dead, deadErr = s.causeCounts(ctx, `SELECT pipeline, stage, COALESCE(reason_class, ''), COALESCE(reason_fingerprint, ''), COUNT(*)
			FROM items WHERE `+itemW+` GROUP BY pipeline, stage, reason_class, reason_fingerprint`, itemArgs)
	}()
	failed, err := s.causeCounts(ctx, `SELECT pipeline, stage, class, fingerprint, COUNT(*)
		FROM attempts WHERE `+attW+` GROUP BY pipeline, stage, class, fingerprint`, attArgs)
	<-done
	if err == nil {
		err = deadErr
	}
	if err != nil {
		return nil, err
	}
	return mergeCauses(dead, failed), nil
}

// keptFailureCounts sums the failure_counts rows that f selects (see
// keptcounts.Groups): its states' items and every failed
// attempt of its run, pipeline, stage, class and fingerprint.
func (s *Store) keptFailureCounts(ctx context.Context, f redrive.ItemFilter) ([]redrive.ErrorGroup, error) {
	kinds := make([]string, 0, len(f.States))
	args := make([]any, 0, len(f.States)+5)
	for _, st := range f.States {
		kinds = append(kinds, "?")
		args = append(args, string(st))
	}
	where := []string{"kind IN (" + strings.Join(kinds, ", ") + ", 'failed')"}
	where, args = causeWhere(f, where, args)
	rows, err := s.r.QueryContext(ctx, `SELECT pipeline, stage, class, fingerprint,
			SUM(CASE WHEN kind = 'failed' THEN 0 ELSE n END), SUM(CASE WHEN kind = 'failed' THEN n ELSE 0 END)
		FROM failure_counts WHERE `+strings.Join(where, " AND ")+`
		GROUP BY pipeline, stage, class, fingerprint`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var groups []redrive.ErrorGroup
	for rows.Next() {
		var g redrive.ErrorGroup
		if err := rows.Scan(&g.Pipeline, &g.Stage, &g.Class, &g.Fingerprint, &g.Dead, &g.Failures); err != nil {
			return nil, err
		}
		if g.Dead > 0 || g.Failures > 0 {
			groups = append(groups, g)
		}
	}
	return groups, rows.Err()
}

// keptCount is Count of a filter that keptcounts.Count serves: the sum of
// its rows of failure_counts, which the triggers keep exact as items die,
// are canceled, redriven, purged or deleted, at most f.Limit when it is
// set. Counting the items read every one of them (docs/BENCHMARKS.md).
func (s *Store) keptCount(ctx context.Context, f redrive.ItemFilter) (int, error) {
	kinds := make([]string, 0, len(f.States))
	args := make([]any, 0, len(f.States)+5)
	for _, st := range f.States {
		kinds = append(kinds, "?")
		args = append(args, string(st))
	}
	where, args := causeWhere(f, []string{"kind IN (" + strings.Join(kinds, ", ") + ")"}, args)
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT COALESCE(SUM(n), 0) FROM failure_counts WHERE `+strings.Join(where, " AND "),
		args...).Scan(&n); err != nil {
		return 0, err
	}
	if f.Limit > 0 {
		n = min(n, f.Limit)
	}
	return n, nil
}

// attemptWhere selects the failed attempts of f's run, pipeline, stage and
// class whose error contains f.ErrorContains and whose fingerprint is
// f.Fingerprint (when set). A stored fingerprint marks a failed attempt:
// successes have none.
func attemptWhere(f redrive.ItemFilter) (string, []any) {
	where := []string{"fingerprint IS NOT NULL"}
	var args []any
	where, args = causeWhere(f, where, args)
	if f.ErrorContains != "" {
		where = append(where, "instr(lower(error), lower(?)) > 0")
		args = append(args, f.ErrorContains)
	}
	return strings.Join(where, " AND "), args
}

// causeCount is how many failures of one pipeline, stage, class and
// fingerprint a grouped read counted.
type causeCount struct {
	pipeline, stage, class, fp string
	n                          int
}

func (s *Store) causeCounts(ctx context.Context, q string, args []any) ([]causeCount, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []causeCount
	for rows.Next() {
		var c causeCount
		if err := rows.Scan(&c.pipeline, &c.stage, &c.class, &c.fp, &c.n); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
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
				groups[i].Dead += c.n
			} else {
				groups[i].Failures += c.n
			}
		}
	}
	return groups
}

// causeWhere adds to where and args the predicates on the columns that
// attempts and failure_counts share: f's pipeline, stage, class,
// fingerprint and run, each when set.
func causeWhere(f redrive.ItemFilter, where []string, args []any) ([]string, []any) {
	for _, c := range []struct{ col, v string }{
		{"pipeline", f.Pipeline}, {"stage", f.Stage}, {"class", f.Class}, {"fingerprint", f.Fingerprint},
	} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	if f.RunID != 0 {
		where = append(where, "run_id = ?")
		args = append(args, f.RunID)
	}
	return where, args
}
