package postgres

import (
	"context"
	"strings"

	"github.com/redrive/redrive"
)

// A page of the dead-letter queue filtered by pipeline, stage or class
// (ListItems of dead or canceled items, ORDER BY id LIMIT n) was planned
// by the statistics of items, and a table of a million dead items that
// nothing has analyzed yet (a surge of deaths, autovacuum off or not come
// round) has none. The planner then guessed every filter selective, read
// the whole group through items_cause or items_dlq and sorted it: 0.4 –
// 1.1 s a page when the filter held a third of the dead items. Walking
// items_pkey instead is right for such a share and wrong for a rare one,
// which only statistics tell apart.
//
// The error groups that failure_counts keeps (kept as deaths are written,
// so exact) name every (pipeline, stage, class, fingerprint) that the
// filter selects, and items_cause is in ID order within each of them. So
// ListItems reads such a page as one walk of items_cause per group, each
// stopping after the page's length, and merges them: a page costs at most
// its length per group, whatever the groups hold and whether or not the
// table was analyzed.

// causeWalkPlan are the planner settings of a walk of error groups: with
// no statistics the planner estimates every arm at one row, so that a
// scan of items_dlq and a sort of what it found cost as little as the
// ordered walk of items_cause (it took the scan, which read a whole
// group per arm: 1.5 s a page at a million dead items). Without sorts,
// each arm is an ordered walk and the arms merge in ID order.
const causeWalkPlan = `SELECT set_config('enable_sort', 'off', true), set_config('jit', 'off', true)`

// maxCauseArms is the most walks a page of the dead-letter queue merges;
// a filter that selects more error groups is left to the planner.
const maxCauseArms = 64

// walksCauses reports whether ListItems reads f by walking its error
// groups (see causeWalkSQL): dead or canceled items filtered by pipeline,
// stage, class or fingerprint and by no run (walksRun), key, IDs or
// action. By fingerprint alone the planner, without statistics, crossed
// all of items_dlq with the fingerprint's entries of items_fingerprint
// and sorted what both held: 36 ms a page at a million dead items.
func walksCauses(f redrive.ItemFilter) bool {
	if f.RunID != 0 || f.Key != "" || len(f.IDs) > 0 || f.ActionID != 0 || len(f.States) == 0 {
		return false
	}
	if f.Pipeline == "" && f.Stage == "" && f.Class == "" && f.Fingerprint == "" {
		return false
	}
	for _, st := range f.States {
		if st != redrive.StateDead && st != redrive.StateCanceled {
			return false
		}
	}
	return true
}

// causeWalkSQL returns the query of ListItems for f (walksCauses), with
// f.Limit set: one arm per error group of f that holds items of its
// states, each walking items_cause (pipeline, stage, reason_class,
// reason_fingerprint, id) from the cursor and stopping after f.Limit
// rows, the arms' rows sorted by ID. ok is false when f selects more
// than maxCauseArms groups.
func (s *Store) causeWalkSQL(ctx context.Context, f redrive.ItemFilter) (sql string, a args, ok bool, err error) {
	groups, err := s.keptFailureCounts(ctx, redrive.ItemFilter{States: f.States, Pipeline: f.Pipeline,
		Stage: f.Stage, Class: f.Class, Fingerprint: f.Fingerprint})
	if err != nil {
		return "", nil, false, err
	}
	// failure_counts keeps a NULL class or fingerprint as '': such a
	// group is walked twice, for '' and for NULL.
	equal := func(col, v string) []string {
		if v == "" {
			return []string{col + " = ''", col + " IS NULL"}
		}
		return []string{col + " = " + a.add(v)}
	}
	var conds [][]string
	for _, g := range groups {
		if g.Dead <= 0 {
			continue // failed attempts alone: no item of f's states
		}
		pipeline, stage := "pipeline = "+a.add(g.Pipeline), "stage = "+a.add(g.Stage)
		for _, class := range equal("reason_class", g.Class) {
			for _, fp := range equal("reason_fingerprint", g.Fingerprint) {
				conds = append(conds, []string{pipeline, stage, class, fp})
			}
		}
		if len(conds) > maxCauseArms {
			return "", nil, false, nil
		}
	}
	rest := f
	rest.Pipeline, rest.Stage, rest.Class, rest.Fingerprint, rest.AfterID = "", "", "", "", 0
	if len(f.States) > 1 {
		rest.States = nil // both: the literal condition below
	}
	if len(conds) == 0 {
		return `SELECT ` + s.itemCols() + ` FROM ` + s.q + `.items WHERE false`, nil, true, nil
	}
	where := s.itemWhere(rest, &a)
	after, limit := a.add(f.AfterID), a.add(f.Limit)
	arms := make([]string, len(conds))
	for i, c := range conds {
		// The state condition is a literal, so that items_cause's predicate
		// is implied in a generic plan too.
		arms[i] = `(SELECT ` + s.itemCols() + ` FROM ` + s.q + `.items
			WHERE state IN ('dead', 'canceled') AND ` + strings.Join(c, " AND ") + ` AND id > ` + after + `
			AND ` + where + ` ORDER BY id LIMIT ` + limit + `)`
	}
	return `SELECT * FROM (` + strings.Join(arms, " UNION ALL ") + `) walk ORDER BY id LIMIT ` + limit, a, true, nil
}
