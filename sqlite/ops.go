package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/redrive/redrive"
)

// UpsertWorker inserts or replaces the row of w.Owner in the workers table.
func (s *Store) UpsertWorker(ctx context.Context, w redrive.Worker) error {
	if w.Owner == "" {
		return errors.New("sqlite: upsert worker: empty owner")
	}
	ps, err := json.Marshal(w.Pipelines)
	if err != nil {
		return fmt.Errorf("sqlite: upsert worker: %w", err)
	}
	return s.writeTx(ctx, "upsert worker", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO workers (owner, host, pid, pipelines, started_at, last_seen, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (owner) DO UPDATE SET host = excluded.host, pid = excluded.pid, pipelines = excluded.pipelines,
				started_at = excluded.started_at, last_seen = excluded.last_seen, expires_at = excluded.expires_at`,
			w.Owner, w.Host, w.PID, string(ps), tnz(w.StartedAt), tnz(w.LastSeen), tnz(w.ExpiresAt))
		return err
	})
}

// RemoveWorker deletes the row of owner.
func (s *Store) RemoveWorker(ctx context.Context, owner string) error {
	return s.writeTx(ctx, "remove worker", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM workers WHERE owner = ?`, owner)
		return err
	})
}

// ListWorkers lists the workers table by owner.
func (s *Store) ListWorkers(ctx context.Context) ([]redrive.Worker, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT owner, host, pid, pipelines, started_at, last_seen, expires_at
		FROM workers ORDER BY owner`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list workers: %w", err)
	}
	defer rows.Close()
	var out []redrive.Worker
	for rows.Next() {
		var (
			w                        redrive.Worker
			ps                       string
			started, seen, expiresAt int64
		)
		if err := rows.Scan(&w.Owner, &w.Host, &w.PID, &ps, &started, &seen, &expiresAt); err != nil {
			return nil, fmt.Errorf("sqlite: list workers: %w", err)
		}
		if err := json.Unmarshal([]byte(ps), &w.Pipelines); err != nil {
			return nil, fmt.Errorf("sqlite: list workers: pipelines of %s: %w", w.Owner, err)
		}
		w.StartedAt, w.LastSeen, w.ExpiresAt = ntz(started), ntz(seen), ntz(expiresAt)
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list workers: %w", err)
	}
	return out, nil
}

// errDryRun rolls back the transaction of a dry run.
var errDryRun = errors.New("dry run")

// RedriveFrom redrives the selected dead or canceled items from the earlier
// stage req.Stage with the input that stage had; see redrive.Store.
func (s *Store) RedriveFrom(ctx context.Context, req redrive.RedriveFromRequest) (int, error) {
	if err := req.Filter.Validate(); err != nil {
		return 0, fmt.Errorf("sqlite: redrive from: %w", err)
	}
	if req.Stage == "" {
		return 0, fmt.Errorf("sqlite: redrive from: %w: no stage", redrive.ErrBadFilter)
	}
	if req.Interval < 0 {
		return 0, errors.New("sqlite: redrive from: negative interval")
	}
	f, err := withStates(req.Filter, []redrive.State{redrive.StateDead}, redrive.StateDead, redrive.StateCanceled)
	if err != nil {
		return 0, fmt.Errorf("sqlite: redrive from: %w", err)
	}
	where, args := itemWhere(f)
	type target struct {
		id, run    int64
		stage      string
		index      int
		payload    []byte
		keep       bool // restart at the stage it stopped at, payload as is
		fromInput  bool // the first stage: the item's original input
		stoppedAt  string
		stoppedIdx int
	}
	n := 0
	err = s.writeTx(ctx, "redrive from", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id, run_id, stage, stage_index FROM items WHERE `+where+` ORDER BY id`+limitClause(f.Limit), args...)
		if err != nil {
			return err
		}
		var ts []target
		for rows.Next() {
			var t target
			if err := rows.Scan(&t.id, &t.run, &t.stoppedAt, &t.stoppedIdx); err != nil {
				rows.Close()
				return err
			}
			ts = append(ts, t)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var missing []int64
		for i := range ts {
			t := &ts[i]
			t.stage = req.Stage
			if t.stoppedAt == req.Stage {
				t.keep, t.index = true, t.stoppedIdx
				continue
			}
			// Inputs are kept on the attempt that moved the item on
			// (migration 0010), and in item_stage_inputs for moves made
			// before it; the latest move to the latest index wins.
			err := tx.QueryRowContext(ctx, `SELECT stage_index, payload FROM (
					SELECT next_stage_index AS stage_index, next_input AS payload, id AS o FROM attempts
					WHERE item_id = ?1 AND next_stage = ?2 AND next_stage_index < ?3
					UNION ALL
					SELECT stage_index, payload, 0 FROM item_stage_inputs
					WHERE item_id = ?1 AND stage = ?2 AND stage_index < ?3)
				ORDER BY stage_index DESC, o DESC LIMIT 1`,
				t.id, req.Stage, t.stoppedIdx).Scan(&t.index, &t.payload)
			if err == nil {
				continue
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			var one int
			err = tx.QueryRowContext(ctx, `SELECT 1 FROM attempts WHERE item_id = ? AND stage = ? AND stage_index = 0 LIMIT 1`,
				t.id, req.Stage).Scan(&one)
			switch {
			case err == nil && t.stoppedIdx > 0:
				t.index, t.fromInput = 0, true
			case err == nil || errors.Is(err, sql.ErrNoRows):
				missing = append(missing, t.id)
			default:
				return err
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("sqlite: redrive from: %w", notReached(req.Stage, missing, len(ts)))
		}
		n = len(ts)
		if req.DryRun {
			return errDryRun
		}
		base := tnz(req.Now)
		runs := map[int64]bool{}
		for i, t := range ts {
			runs[t.run] = true
			q := `UPDATE items SET state = 'pending', stage = ?, stage_index = ?, payload = ?, attempt = 0, rate_limit_waits = 0, failed_attempts = 0,
				next_at = ?, ready = ?, updated_at = ?, lease_owner = NULL, lease_expires_at = NULL,
				reason_stage = NULL, reason_class = NULL, reason_error = NULL, reason_attempts = NULL, reason_at = NULL,
			reason_fingerprint = NULL
				WHERE id = ?`
			next := base + int64(i)*int64(req.Interval)
			qargs := []any{t.stage, t.index, blob(t.payload), next, next <= base, base, t.id}
			switch {
			case t.keep:
				q = strings.Replace(q, "stage = ?, stage_index = ?, payload = ?, ", "", 1)
				qargs = qargs[3:]
			case t.fromInput:
				q = strings.Replace(q, "payload = ?", "payload = input", 1)
				qargs = append(qargs[:2], qargs[3:]...)
			}
			if _, err := tx.ExecContext(ctx, q, qargs...); err != nil {
				return err
			}
		}
		for run := range runs {
			if _, err := tx.ExecContext(ctx, `UPDATE runs SET status = 'running', finished_at = NULL, reason = '' WHERE id = ?`, run); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, errDryRun) {
		return n, nil
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

// notReached says which selected items never reached stage.
func notReached(stage string, ids []int64, of int) error {
	list := make([]string, 0, 5)
	for _, id := range ids[:min(len(ids), 5)] {
		list = append(list, fmt.Sprint(id))
	}
	more := ""
	if len(ids) > 5 {
		more = ", ..."
	}
	return &redrive.FilterError{Field: "from_stage", Msg: fmt.Sprintf("%d of the %d selected items never reached stage %q, so it has no input to restart them with (items %s%s): narrow the selection, e.g. with a stage filter",
		len(ids), of, stage, strings.Join(list, ", "), more)}
}
