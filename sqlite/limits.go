package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/redrive/redrive"
)

// ReserveSlots reserves req.Want slots of the dependency's pace, which every process
// using the file shares, in one write transaction.
func (s *Store) ReserveSlots(ctx context.Context, req redrive.SlotRequest) (redrive.SlotGrant, error) {
	var g redrive.SlotGrant
	now := req.Now.UnixNano()
	iv := int64(req.Interval)
	err := s.writeTx(ctx, "reserve slots", func(tx *sql.Tx) error {
		var tat, gate int64
		err := tx.QueryRowContext(ctx, `INSERT INTO limits (name) VALUES (?)
			ON CONFLICT (name) DO UPDATE SET name = excluded.name
			RETURNING tat, gate_until`, req.Name).Scan(&tat, &gate)
		if err != nil {
			return err
		}
		if gate > now {
			g.GateUntil = time.Unix(0, gate).UTC()
			return nil
		}
		base := max(tat, now)
		g.Granted = req.Want
		g.Start = time.Unix(0, base-int64(max(req.Burst, 1)-1)*iv).UTC()
		_, err = tx.ExecContext(ctx, `UPDATE limits SET tat = ? WHERE name = ?`, base+int64(req.Want)*iv, req.Name)
		return err
	})
	if err != nil {
		return redrive.SlotGrant{}, err
	}
	return g, nil
}

// CloseGate closes the dependency's shared gate until until, or leaves it closed
// until a later time it already had.
func (s *Store) CloseGate(ctx context.Context, name string, until time.Time) error {
	return s.writeTx(ctx, "close gate", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO limits (name, gate_until) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET gate_until = max(gate_until, excluded.gate_until)`, name, until.UnixNano())
		return err
	})
}

// RateLimitedWaits lists the waits after the run's rate-limited attempts.
func (s *Store) RateLimitedWaits(ctx context.Context, runID int64) ([]redrive.Wait, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT a.stage, a.finished_at, a.delay_ns FROM items i
		JOIN attempts a ON a.item_id = i.id
		WHERE i.run_id = ? AND a.outcome = 'rate_limited' ORDER BY a.finished_at`, runID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: rate-limited waits: %w", err)
	}
	defer rows.Close()
	var out []redrive.Wait
	for rows.Next() {
		var w redrive.Wait
		var from, delay int64
		if err := rows.Scan(&w.Stage, &from, &delay); err != nil {
			return nil, fmt.Errorf("sqlite: rate-limited waits: %w", err)
		}
		w.From, w.Delay = time.Unix(0, from).UTC(), time.Duration(delay)
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: rate-limited waits: %w", err)
	}
	return out, nil
}
