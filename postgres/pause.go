package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// PauseStage records a paused stage.
func (s *Store) PauseStage(ctx context.Context, p redrive.StagePause) (bool, error) {
	if p.Pipeline == "" || p.Stage == "" {
		return false, errors.New("postgres: pause stage: pipeline and stage are required")
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO `+s.q+`.paused_stages (pipeline, stage, paused_by, paused_at, reason) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (pipeline, stage) DO NOTHING`, p.Pipeline, p.Stage, p.By, p.At, p.Reason)
	if err != nil {
		return false, s.fail("pause stage", err)
	}
	return tag.RowsAffected() > 0, nil
}

// ResumeStage deletes the pause of a stage.
func (s *Store) ResumeStage(ctx context.Context, pipeline, stage string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.q+`.paused_stages WHERE pipeline = $1 AND stage = $2`, pipeline, stage)
	if err != nil {
		return false, s.fail("resume stage", err)
	}
	return tag.RowsAffected() > 0, nil
}

// PausedStages lists the paused stages.
func (s *Store) PausedStages(ctx context.Context) ([]redrive.StagePause, error) {
	rows, err := s.pool.Query(ctx, `SELECT pipeline, stage, paused_by, paused_at, reason FROM `+s.q+`.paused_stages ORDER BY pipeline, stage`)
	if err != nil {
		return nil, s.fail("paused stages", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (redrive.StagePause, error) {
		var p redrive.StagePause
		err := row.Scan(&p.Pipeline, &p.Stage, &p.By, &p.At, &p.Reason)
		p.At = p.At.UTC()
		return p, err
	})
	if err != nil {
		return nil, s.fail("paused stages", err)
	}
	return out, nil
}
