package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
)

// Inputs kept before migration 0010 live in item_stage_inputs, not on the
// attempts: RedriveFrom still restarts an item from them.
func TestRedriveFromInputKeptBeforeMigration10(t *testing.T) {
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	q := pgx.Identifier{s.Schema()}.Sanitize()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a",
		Items: []redrive.NewItem{{Payload: []byte("input")}}, Now: now}); err != nil {
		t.Fatal(err)
	}
	step := func(c func(l redrive.Lease) redrive.Completion) {
		t.Helper()
		ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "t", Pipelines: []string{"p"}, Limit: 1, Now: now, LeaseUntil: now.Add(time.Hour)})
		if err != nil || len(ls) != 1 {
			t.Fatalf("claim = %d, %v", len(ls), err)
		}
		if ok, err := s.Complete(ctx, []redrive.Completion{c(ls[0])}); err != nil || !ok[0] {
			t.Fatalf("complete = %v, %v", ok, err)
		}
	}
	moveTo := func(stage string, payload string) func(l redrive.Lease) redrive.Completion {
		return func(l redrive.Lease) redrive.Completion {
			return redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StatePending, Stage: stage,
				StageIndex: l.Item.StageIndex + 1, NextAt: now, Payload: []byte(payload), Now: now,
				Record: redrive.Attempt{Stage: l.Item.Stage, StageIndex: l.Item.StageIndex, Number: 1,
					Outcome: redrive.OutcomeSucceeded, StartedAt: now, FinishedAt: now}}
		}
	}
	step(moveTo("b", "to-b"))
	step(moveTo("c", "to-c"))
	step(func(l redrive.Lease) redrive.Completion {
		return redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StateDead, Stage: "c", StageIndex: 2,
			Attempt: 1, Now: now, Reason: &redrive.Reason{Stage: "c", Class: "final", Error: "bad", Attempts: 1, At: now},
			Record: redrive.Attempt{Stage: "c", StageIndex: 2, Number: 1, Outcome: redrive.OutcomeDead, StartedAt: now, FinishedAt: now}}
	})
	// What a database migrated before 0010 holds: the inputs in their own
	// table, none on the attempts.
	var moved int
	if err := s.Pool().QueryRow(ctx, `WITH x AS (
			INSERT INTO `+q+`.item_stage_inputs (item_id, stage_index, stage, payload)
			SELECT item_id, next_stage_index, next_stage, next_input FROM `+q+`.attempts WHERE next_stage IS NOT NULL
			RETURNING 1),
		u AS (UPDATE `+q+`.attempts SET next_stage = NULL, next_stage_index = NULL, next_input = NULL
			WHERE next_stage IS NOT NULL RETURNING 1)
		SELECT (SELECT count(*) FROM x) + (SELECT count(*) FROM u)`).Scan(&moved); err != nil || moved != 4 {
		t.Fatalf("moving the inputs to item_stage_inputs: %d rows, %v; want 2 inserted and 2 cleared", moved, err)
	}
	n, err := s.RedriveFrom(ctx, redrive.RedriveFromRequest{Filter: redrive.ItemFilter{RunID: run.ID}, Stage: "b", Now: now})
	if err != nil || n != 1 {
		t.Fatalf("RedriveFrom(b) = %d, %v; want 1", n, err)
	}
	items, err := s.ListItems(ctx, redrive.ItemFilter{RunID: run.ID})
	if err != nil || len(items) != 1 {
		t.Fatalf("ListItems = %v, %v", items, err)
	}
	if it := items[0]; it.Stage != "b" || it.StageIndex != 1 || string(it.Payload) != "to-b" || it.State != redrive.StatePending {
		t.Errorf("redriven item: stage %q (%d), payload %q, state %s; want b (1), \"to-b\", pending", it.Stage, it.StageIndex, it.Payload, it.State)
	}
}
