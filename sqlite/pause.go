package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/redrive/redrive"
)

// PauseStage records a paused stage.
func (s *Store) PauseStage(ctx context.Context, p redrive.StagePause) (bool, error) {
	if p.Pipeline == "" || p.Stage == "" {
		return false, errors.New("sqlite: pause stage: pipeline and stage are required")
	}
	var n int64
	err := s.writeTx(ctx, "pause stage", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO paused_stages (pipeline, stage, paused_by, paused_at, reason) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (pipeline, stage) DO NOTHING`, p.Pipeline, p.Stage, p.By, tnz(p.At), p.Reason)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n > 0, err
}

// ResumeStage deletes the pause of a stage.
func (s *Store) ResumeStage(ctx context.Context, pipeline, stage string) (bool, error) {
	var n int64
	err := s.writeTx(ctx, "resume stage", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM paused_stages WHERE pipeline = ? AND stage = ?`, pipeline, stage)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n > 0, err
}

// PausedStages lists the paused stages.
func (s *Store) PausedStages(ctx context.Context) ([]redrive.StagePause, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT pipeline, stage, paused_by, paused_at, reason FROM paused_stages ORDER BY pipeline, stage`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: paused stages: %w", err)
	}
	defer rows.Close()
	var out []redrive.StagePause
	for rows.Next() {
		var p redrive.StagePause
		var at int64
		if err := rows.Scan(&p.Pipeline, &p.Stage, &p.By, &at, &p.Reason); err != nil {
			return nil, fmt.Errorf("sqlite: paused stages: %w", err)
		}
		p.At = ntz(at)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: paused stages: %w", err)
	}
	return out, nil
}
