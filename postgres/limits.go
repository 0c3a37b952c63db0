package postgres

import (
	"context"
	"time"

	"github.com/redrive/redrive"
)

// ReserveSlots reserves req.Want slots of the dependency's pace, which every process
// of the deployment shares, with one statement: the row is locked by its update, so
// concurrent reservations queue on it and never share a slot.
func (s *Store) ReserveSlots(ctx context.Context, req redrive.SlotRequest) (redrive.SlotGrant, error) {
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.q+`.limits (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`, req.Name); err != nil {
		return redrive.SlotGrant{}, s.fail("reserve slots", err)
	}
	iv := req.Interval
	// The update leaves tat alone while the gate is closed; base is the pace's
	// next slot before the update (RETURNING sees the new row, so it is
	// computed again from the old one in old).
	var (
		base time.Time
		gate *time.Time
	)
	err := s.pool.QueryRow(ctx, `WITH old AS (
			SELECT name, greatest(coalesce(tat, $2), $2) AS base, gate_until
			FROM `+s.q+`.limits WHERE name = $1 FOR UPDATE)
		UPDATE `+s.q+`.limits l SET tat = CASE WHEN old.gate_until > $2 THEN l.tat ELSE old.base + $3 * $4::bigint * interval '1 microsecond' END
		FROM old WHERE l.name = old.name
		RETURNING old.base, old.gate_until`, req.Name, req.Now, req.Want, iv.Microseconds()).Scan(&base, &gate)
	if err != nil {
		return redrive.SlotGrant{}, s.fail("reserve slots", err)
	}
	if gate != nil && gate.After(req.Now) {
		return redrive.SlotGrant{GateUntil: gate.UTC()}, nil
	}
	return redrive.SlotGrant{Granted: req.Want, Start: base.Add(-time.Duration(max(req.Burst, 1)-1) * iv).UTC()}, nil
}

// CloseGate closes the dependency's shared gate until until, or leaves it closed
// until a later time it already had.
func (s *Store) CloseGate(ctx context.Context, name string, until time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.q+`.limits (name, gate_until) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET gate_until = greatest(`+s.q+`.limits.gate_until, excluded.gate_until)`, name, until)
	if err != nil {
		return s.fail("close gate", err)
	}
	return nil
}

// RateLimitedWaits lists the waits after the run's rate-limited attempts.
func (s *Store) RateLimitedWaits(ctx context.Context, runID int64) ([]redrive.Wait, error) {
	rows, err := s.pool.Query(ctx, `SELECT a.stage, a.finished_at, a.delay_ns FROM `+s.q+`.items i
		JOIN `+s.q+`.attempts a ON a.item_id = i.id
		WHERE i.run_id = $1 AND a.outcome = 'rate_limited' ORDER BY a.finished_at`, runID)
	if err != nil {
		return nil, s.fail("rate-limited waits", err)
	}
	defer rows.Close()
	var out []redrive.Wait
	for rows.Next() {
		var w redrive.Wait
		var delay int64
		if err := rows.Scan(&w.Stage, &w.From, &delay); err != nil {
			return nil, s.fail("rate-limited waits", err)
		}
		w.From, w.Delay = w.From.UTC(), time.Duration(delay)
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("rate-limited waits", err)
	}
	return out, nil
}
