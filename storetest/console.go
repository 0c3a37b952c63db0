package storetest

import (
	"fmt"
	"slices"
	"time"

	"github.com/redrive/redrive"
)

// testErrorGroups: stores count the exact messages of dead items and of
// failed attempts under the filter; grouping by fingerprint merges the
// messages that differ only in ids.
func testErrorGroups(h *h) {
	r, _ := dlqFixture(h)
	dead, err := h.s.DeadErrors(h.ctx, redrive.ItemFilter{RunID: r.ID, Limit: 1, AfterID: 1 << 40})
	if err != nil {
		h.Fatal(err)
	}
	want := []redrive.ErrorCount{
		{Pipeline: "p", Stage: "a", Class: "final", Error: "400 Bad Request", Count: 1},
		{Pipeline: "p", Stage: "a", Class: "final", Error: "disk 100% full", Count: 1},
		{Pipeline: "p", Stage: "a", Class: "retryable", Error: "context deadline exceeded", Count: 1},
		{Pipeline: "p", Stage: "b", Class: "retryable", Error: "context deadline exceeded", Count: 1},
	}
	if !slices.Equal(dead, want) {
		h.Errorf("DeadErrors(run, limit and after-id ignored) = %+v, want %+v", dead, want)
	}
	dead, err = h.s.DeadErrors(h.ctx, redrive.ItemFilter{Stage: "b"})
	if err != nil || !slices.Equal(dead, want[3:]) {
		h.Errorf("DeadErrors(stage b) = %+v, %v; want %+v", dead, err, want[3:])
	}
	dead, err = h.s.DeadErrors(h.ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateCanceled}})
	if err != nil || !slices.Equal(dead, []redrive.ErrorCount{{Pipeline: "p", Stage: "a", Class: redrive.ClassCanceled, Error: "operator", Count: 1}}) {
		h.Errorf("DeadErrors(canceled) = %+v, %v", dead, err)
	}
	failed, err := h.s.AttemptErrors(h.ctx, redrive.ItemFilter{RunID: r.ID, Stage: "b"})
	if err != nil {
		h.Fatal(err)
	}
	if !slices.Equal(failed, []redrive.ErrorCount{
		{Pipeline: "p", Stage: "b", Class: "retryable", Error: "503", Count: 1},
		{Pipeline: "p", Stage: "b", Class: "retryable", Error: "context deadline exceeded", Count: 1},
	}) {
		h.Errorf("AttemptErrors(stage b) = %+v", failed)
	}
	failed, err = h.s.AttemptErrors(h.ctx, redrive.ItemFilter{Class: "final", ErrorContains: "BAD"})
	if err != nil || !slices.Equal(failed, []redrive.ErrorCount{{Pipeline: "p", Stage: "a", Class: "final", Error: "400 Bad Request", Count: 1}}) {
		h.Errorf("AttemptErrors(class final, error BAD) = %+v, %v", failed, err)
	}

	// Twelve items of pipeline m die with messages that differ only in
	// their id; two more with another cause; each also failed once before.
	m := h.run("m", "")
	h.enqueueN(m, "llm", Base, 14)
	for _, l := range h.claimAll("m", Base) {
		h.complete(retry(l, Base, Base, fmt.Sprintf("item %d: HTTP 503", l.Item.ID)))
	}
	for i, l := range h.claimAll("m", Base) {
		msg := fmt.Sprintf("item %d: malformed model output at byte %d", l.Item.ID, 10*i)
		if i >= 12 {
			msg = fmt.Sprintf(`unknown field "f%d"`, i)
		}
		h.complete(kill(l, at(time.Minute), "final", msg))
	}
	groups, err := redrive.ErrorGroups(h.ctx, h.s, redrive.ItemFilter{Pipeline: "m"})
	if err != nil {
		h.Fatal(err)
	}
	if len(groups) != 3 {
		h.Fatalf("ErrorGroups(m) = %+v, want 3 groups", groups)
	}
	g := groups[0]
	if g.Fingerprint != "item <n>: malformed model output at byte <n>" || g.Dead != 12 || g.Failures != 12 || g.Messages != 12 || len(g.Examples) != 3 {
		h.Errorf("first group = %+v, want 12 dead and 12 failed attempts of 12 messages", g)
	}
	if g := groups[1]; g.Fingerprint != "unknown field <quoted>" || g.Dead != 2 {
		h.Errorf("second group = %+v", g)
	}
	if g := groups[2]; g.Fingerprint != "item <n>: HTTP 503" || g.Dead != 0 || g.Failures != 14 || g.Class != "retryable" {
		h.Errorf("third group = %+v", g)
	}
}

// testAuditLog: actions are kept in order and listed newest first, in
// pages.
func testAuditLog(h *h) {
	if got, err := h.s.ListActions(h.ctx, redrive.AuditFilter{}); err != nil || len(got) != 0 {
		h.Fatalf("empty audit log = %+v, %v", got, err)
	}
	want := []redrive.AuditAction{
		{At: at(time.Minute), Actor: "default", Kind: "redrive", Filter: "stage=fetch&class=final", Count: 30, Detail: "rate 5/s"},
		{At: at(2 * time.Minute), Actor: "ops", Kind: "purge", Filter: "class=retryable", Count: 12},
		{At: at(3 * time.Minute), Actor: "default", Kind: "pause", Filter: "pipeline=p&stage=a"},
	}
	for i := range want {
		id, err := h.s.RecordAction(h.ctx, want[i])
		if err != nil {
			h.Fatal(err)
		}
		if i > 0 && id <= want[i-1].ID {
			h.Errorf("action IDs do not increase: %d after %d", id, want[i-1].ID)
		}
		want[i].ID = id
	}
	got, err := h.s.ListActions(h.ctx, redrive.AuditFilter{})
	if err != nil {
		h.Fatal(err)
	}
	if len(got) != 3 || got[0] != want[2] || got[1] != want[1] || got[2] != want[0] {
		h.Errorf("ListActions = %+v, want %+v newest first", got, want)
	}
	got, err = h.s.ListActions(h.ctx, redrive.AuditFilter{BeforeID: want[2].ID, Limit: 1})
	if err != nil || len(got) != 1 || got[0] != want[1] {
		h.Errorf("ListActions(before the last, limit 1) = %+v, %v", got, err)
	}
	if _, err := h.s.RecordAction(h.ctx, redrive.AuditAction{Kind: "purge"}); err == nil {
		h.Error("RecordAction without an actor succeeded")
	}
}

// testPauseStages: pauses are kept until resumed; pausing twice keeps the
// first record.
func testPauseStages(h *h) {
	first := redrive.StagePause{Pipeline: "p", Stage: "b", By: "default", At: at(time.Minute)}
	for _, p := range []redrive.StagePause{first, {Pipeline: "p", Stage: "a", By: "ops", At: at(2 * time.Minute)}} {
		if ok, err := h.s.PauseStage(h.ctx, p); err != nil || !ok {
			h.Fatalf("PauseStage(%+v) = %v, %v", p, ok, err)
		}
	}
	if ok, err := h.s.PauseStage(h.ctx, redrive.StagePause{Pipeline: "p", Stage: "b", By: "again", At: at(3 * time.Minute)}); err != nil || ok {
		h.Errorf("PauseStage(paused) = %v, %v; want false", ok, err)
	}
	got, err := h.s.PausedStages(h.ctx)
	if err != nil {
		h.Fatal(err)
	}
	want := []redrive.StagePause{{Pipeline: "p", Stage: "a", By: "ops", At: at(2 * time.Minute)}, first}
	if !slices.Equal(got, want) {
		h.Errorf("PausedStages = %+v, want %+v", got, want)
	}
	if ok, err := h.s.ResumeStage(h.ctx, "p", "b"); err != nil || !ok {
		h.Errorf("ResumeStage = %v, %v", ok, err)
	}
	if ok, err := h.s.ResumeStage(h.ctx, "p", "b"); err != nil || ok {
		h.Errorf("ResumeStage(not paused) = %v, %v; want false", ok, err)
	}
	if got, err := h.s.PausedStages(h.ctx); err != nil || !slices.Equal(got, want[:1]) {
		h.Errorf("PausedStages after resuming b = %+v, %v", got, err)
	}
}
