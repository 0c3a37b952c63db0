package postgres

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/redrive/redrive"
)

var _ redrive.PaceRecorder = (*Store)(nil)

// AddPaceWaits adds the waits to their runs' sums with one statement. The
// rows are written in (run, stage) order, so that processes adding at once
// lock them in one order. Waits of a run that no longer exists are dropped.
func (s *Store) AddPaceWaits(ctx context.Context, ws []redrive.PaceWait) error {
	if len(ws) == 0 {
		return nil
	}
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b redrive.PaceWait) int {
		return cmp.Or(cmp.Compare(a.RunID, b.RunID), cmp.Compare(a.Stage, b.Stage))
	})
	runs := make([]int64, len(ws))
	stages := make([]string, len(ws))
	calls := make([]int64, len(ws))
	waited := make([]int64, len(ws))
	for i, w := range ws {
		runs[i], stages[i], calls[i], waited[i] = w.RunID, w.Stage, w.Calls, int64(w.Waited)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.q+`.pace_waits (run_id, stage, calls, waited_ns)
		SELECT w.run_id, w.stage, w.calls, w.waited_ns
		FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS w(run_id, stage, calls, waited_ns, ord)
		JOIN `+s.q+`.runs r ON r.id = w.run_id
		ORDER BY w.ord
		ON CONFLICT (run_id, stage) DO UPDATE SET calls = pace_waits.calls + excluded.calls,
			waited_ns = pace_waits.waited_ns + excluded.waited_ns`, runs, stages, calls, waited)
	if err != nil {
		return s.fail("add pace waits", err)
	}
	return nil
}

// PaceWaits returns the pace waits of run runID, stage by stage.
func (s *Store) PaceWaits(ctx context.Context, runID int64) ([]redrive.PaceWait, error) {
	rows, err := s.pool.Query(ctx, `SELECT stage, calls, waited_ns FROM `+s.q+`.pace_waits
		WHERE run_id = $1 ORDER BY stage`, runID)
	if err != nil {
		return nil, s.fail("pace waits", err)
	}
	defer rows.Close()
	var out []redrive.PaceWait
	for rows.Next() {
		w := redrive.PaceWait{RunID: runID}
		var ns int64
		if err := rows.Scan(&w.Stage, &w.Calls, &ns); err != nil {
			return nil, s.fail("pace waits", err)
		}
		w.Waited = time.Duration(ns)
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("pace waits", err)
	}
	return out, nil
}
