package main

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/redrive/redrive"
	"github.com/spf13/cobra"
)

// newStagesCmd returns `redrive stages`: pause, resume and list paused
// stages, durably: every worker process on the database skips a paused
// stage's items within a second.
func newStagesCmd() *cobra.Command {
	g := newGroupCmd("stages", "Pause and resume stages for every worker process")
	g.AddCommand(stageToggleCmd(true), stageToggleCmd(false), pausedListCmd())
	return g
}

func stageToggleCmd(pause bool) *cobra.Command {
	var pipeline, stage, reason string
	verb, short := "resume", "Resume a paused stage: workers claim its items again"
	if pause {
		verb, short = "pause", "Pause a stage: no worker process claims its items until it is resumed"
	}
	cmd := &cobra.Command{Use: verb, Short: short, Args: noArgs}
	cmd.Flags().StringVar(&pipeline, "pipeline", "", "the stage's pipeline (required)")
	cmd.Flags().StringVar(&stage, "stage", "", "the stage (required)")
	if pause {
		cmd.Flags().StringVar(&reason, "reason", "", "why, for the other operators and the audit log (default none)")
	}
	actor := addActorFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if pipeline == "" {
			return flagErrorf("pipeline", "required: name the stage's pipeline")
		}
		if stage == "" {
			return flagErrorf("stage", "required: name the stage")
		}
		who, err := actorOf(cmd, *actor)
		if err != nil {
			return err
		}
		return withStore(cmd, func(ctx context.Context, s redrive.Store) error {
			if pause {
				// A stage no item has reached may still be worked later:
				// only a pipeline nothing knows is refused.
				if err := checkFilter(ctx, s, redrive.ItemFilter{Pipeline: pipeline}); err != nil {
					return err
				}
			}
			now := time.Now().UTC()
			var changed bool
			var err error
			if pause {
				changed, err = s.PauseStage(ctx, redrive.StagePause{Pipeline: pipeline, Stage: stage, By: who, At: now, Reason: reason})
			} else {
				changed, err = s.ResumeStage(ctx, pipeline, stage)
			}
			if err != nil {
				return fmt.Errorf("%s stage: %w", verb, err)
			}
			w := cmd.OutOrStdout()
			if !changed {
				state := "already paused"
				if !pause {
					state = "not paused"
				}
				fmt.Fprintf(w, "stage %s/%s was %s: nothing changed\n", pipeline, stage, state)
				return nil
			}
			filter := url.Values{"pipeline": {pipeline}, "stage": {stage}}.Encode()
			if _, err := s.RecordAction(ctx, redrive.AuditAction{At: now, Actor: who, Kind: verb, Filter: filter, Detail: reason}); err != nil {
				return fmt.Errorf("stage %s/%s: %sd, but the audit log could not record it: %w", pipeline, stage, verb, err)
			}
			fmt.Fprintf(w, "stage %s/%s %sd\n", pipeline, stage, verb)
			return nil
		})
	}
	return cmd
}

func pausedListCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "list", Short: "List the paused stages", Args: noArgs}
	asJSON := addJSONFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return withStore(cmd, func(ctx context.Context, s redrive.Store) error {
			ps, err := s.PausedStages(ctx)
			if err != nil {
				return fmt.Errorf("list paused stages: %w", err)
			}
			w := cmd.OutOrStdout()
			if *asJSON {
				if ps == nil {
					ps = []redrive.StagePause{}
				}
				return writeJSON(w, ps)
			}
			t := newTable(w, "PIPELINE", "STAGE", "PAUSED BY", "SINCE", "REASON")
			for _, p := range ps {
				t.row(p.Pipeline, p.Stage, p.By, fmtTime(p.At), p.Reason)
			}
			return t.flush()
		})
	}
	return cmd
}
