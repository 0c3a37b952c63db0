package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/redrive/redrive"
)

var _ redrive.PaceRecorder = (*Store)(nil)

// AddPaceWaits adds the waits to their runs' sums in one write transaction.
// Waits of a run that no longer exists are dropped.
func (s *Store) AddPaceWaits(ctx context.Context, ws []redrive.PaceWait) error {
	if len(ws) == 0 {
		return nil
	}
	return s.writeTx(ctx, "add pace waits", func(tx *sql.Tx) error {
		for _, w := range ws {
			_, err := tx.ExecContext(ctx, `INSERT INTO pace_waits (run_id, stage, calls, waited_ns)
				SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM runs WHERE id = ?)
				ON CONFLICT (run_id, stage) DO UPDATE SET calls = calls + excluded.calls,
					waited_ns = waited_ns + excluded.waited_ns`,
				w.RunID, w.Stage, w.Calls, int64(w.Waited), w.RunID)
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// PaceWaits returns the pace waits of run runID, stage by stage.
func (s *Store) PaceWaits(ctx context.Context, runID int64) ([]redrive.PaceWait, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT stage, calls, waited_ns FROM pace_waits
		WHERE run_id = ? ORDER BY stage`, runID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: pace waits: %w", err)
	}
	defer rows.Close()
	var out []redrive.PaceWait
	for rows.Next() {
		w := redrive.PaceWait{RunID: runID}
		var ns int64
		if err := rows.Scan(&w.Stage, &w.Calls, &ns); err != nil {
			return nil, fmt.Errorf("sqlite: pace waits: %w", err)
		}
		w.Waited = time.Duration(ns)
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: pace waits: %w", err)
	}
	return out, nil
}
