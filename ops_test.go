package redrive_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWorkerRowFollowsClient(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		cfg := testConfig(nil)
		cfg.Owner, cfg.HeartbeatInterval = "test-worker", 20*time.Millisecond
		c := redrive.NewClient(s, cfg)
		for _, name := range []string{"q", "p"} {
			if err := c.Register(redrive.Pipeline{Name: name, Stages: []redrive.Stage{{Name: "a", Handle: echo}}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		ws, err := s.ListWorkers(ctx)
		if err != nil || len(ws) != 1 {
			t.Fatalf("ListWorkers after Start = %+v, %v; want this client", ws, err)
		}
		w := ws[0]
		if w.Owner != "test-worker" || !slices.Equal(w.Pipelines, []string{"p", "q"}) || w.PID == 0 || !w.Live(time.Now()) {
			t.Errorf("worker row = %+v", w)
		}
		waitFor(t, "a heartbeat", func() bool {
			ws, err := s.ListWorkers(ctx)
			return err == nil && len(ws) == 1 && ws[0].LastSeen.After(w.LastSeen)
		})
		if live, err := redrive.LiveWorkers(ctx, s, "p", time.Now()); err != nil || len(live) != 1 {
			t.Errorf("LiveWorkers(p) = %+v, %v", live, err)
		}
		if live, _ := redrive.LiveWorkers(ctx, s, "other", time.Now()); len(live) != 0 {
			t.Errorf("LiveWorkers(other) = %+v", live)
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := c.Stop(sctx); err != nil {
			t.Fatal(err)
		}
		if ws, err := s.ListWorkers(ctx); err != nil || len(ws) != 0 {
			t.Errorf("ListWorkers after Stop = %+v, %v; want none", ws, err)
		}
	})
}

func echo(_ context.Context, it *redrive.Item) ([]byte, error) { return it.Payload, nil }

func TestStartRunRefusesOtherSource(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		c := startClient(t, s, testConfig(nil), redrive.Pipeline{Name: "p", Stages: []redrive.Stage{{Name: "a", Handle: echo}}})
		ctx := context.Background()
		jan := redrive.RunOptions{Name: "p:items.jsonl", Source: "jan/items.jsonl", SourceHash: "sha256:aaa"}
		run, err := c.StartRun(ctx, "p", []redrive.NewItem{{Key: "1"}, {Key: "2"}}, jan)
		if err != nil {
			t.Fatal(err)
		}
		wait(t, c, run)
		feb := jan
		feb.Source, feb.SourceHash = "feb/items.jsonl", "sha256:bbb"
		_, err = c.StartRun(ctx, "p", []redrive.NewItem{{Key: "1"}, {Key: "3"}}, feb)
		if !errors.Is(err, redrive.ErrRunMismatch) {
			t.Fatalf("StartRun with other input = %v, want ErrRunMismatch", err)
		}
		if got, _ := s.GetRun(ctx, run.ID); got.Counts.Total != 2 {
			t.Errorf("the refused input was added: %+v", got.Counts)
		}
		// The same input resumes.
		if again, err := c.StartRun(ctx, "p", []redrive.NewItem{{Key: "1"}, {Key: "2"}}, jan); err != nil || again.ID != run.ID {
			t.Errorf("StartRun with the same input = %+v, %v; want run %d resumed", again, err, run.ID)
		}
	})
}

// TestRedriveFromEarlierStage: an item killed by bad output of an earlier
// stage succeeds after a redrive from that stage, and cannot by a redrive
// from the stage that failed.
func TestRedriveFromEarlierStage(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		var generated atomic.Int32
		gen := func(_ context.Context, it *redrive.Item) ([]byte, error) {
			if generated.Add(1) == 1 {
				return []byte(`"bad"`), nil // the model's first answer is malformed
			}
			return []byte(`"good"`), nil
		}
		validate := func(_ context.Context, it *redrive.Item) ([]byte, error) {
			if string(it.Payload) != `"good"` {
				return nil, errors.New("invalid model output: " + string(it.Payload))
			}
			return it.Payload, nil
		}
		p := redrive.Pipeline{Name: "llm", Stages: []redrive.Stage{
			{Name: "generate", Handle: gen, Policy: fast(1)},
			{Name: "validate", Handle: validate, Policy: fast(2)},
		}}
		c := startClient(t, s, testConfig(nil), p)
		ctx := context.Background()
		run, err := c.StartRun(ctx, "llm", []redrive.NewItem{{Payload: []byte(`"prompt"`)}}, redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := wait(t, c, run); r.Counts.Dead != 1 {
			t.Fatalf("first pass: %+v, want the item dead at validate", r.Counts)
		}
		// A redrive from validate feeds the same bad output again.
		if n, err := c.Redrive(ctx, redrive.ItemFilter{RunID: run.ID}, redrive.RedriveOptions{}); err != nil || n != 1 {
			t.Fatalf("Redrive = %d, %v", n, err)
		}
		if r := wait(t, c, run); r.Counts.Dead != 1 {
			t.Fatalf("after a redrive from validate: %+v, want it dead again", r.Counts)
		}
		n, err := c.Redrive(ctx, redrive.ItemFilter{RunID: run.ID}, redrive.RedriveOptions{FromStage: "generate"})
		if err != nil || n != 1 {
			t.Fatalf("Redrive from generate = %d, %v", n, err)
		}
		r := wait(t, c, run)
		if r.Counts.Succeeded != 1 || r.Status != redrive.RunCompleted {
			t.Fatalf("after a redrive from generate: %s %+v, want completed", r.Status, r.Counts)
		}
		items, _ := s.ListItems(ctx, redrive.ItemFilter{RunID: run.ID})
		if string(items[0].Payload) != `"good"` || generated.Load() != 2 {
			t.Errorf("payload %s after %d generations", items[0].Payload, generated.Load())
		}
	})
}

func TestCheckFilter(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		// warm fails each item's first attempt: its cause is in the
		// attempts only, no item dies of it.
		var warmed sync.Map
		warm := func(_ context.Context, it *redrive.Item) ([]byte, error) {
			if _, again := warmed.LoadOrStore(it.ID, true); !again {
				return nil, errors.New("cold start of worker 7")
			}
			return it.Payload, nil
		}
		p := redrive.Pipeline{Name: "p", Stages: []redrive.Stage{
			{Name: "fetch", Handle: echo},
			{Name: "warm", Handle: warm, Policy: fast(2)},
			{Name: "llm_call", Handle: func(context.Context, *redrive.Item) ([]byte, error) { return nil, errors.New("boom") }, Policy: fast(1)},
		}}
		c := startClient(t, s, testConfig(nil), p)
		ctx := context.Background()
		run, err := c.StartRun(ctx, "p", items(2), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, c, run)
		act, err := s.RecordAction(ctx, redrive.AuditAction{At: time.Now(), Actor: "ops", Kind: "redrive"})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []redrive.ItemFilter{
			{RunID: run.ID, Class: "retryable", Stage: "llm_call"},
			{Pipeline: "p", Class: "final"},
			{},
			{Fingerprint: redrive.Fingerprint("boom")},
			{Fingerprint: redrive.Fingerprint("cold start of worker 7")},
			{ActionID: act},
		} {
			if err := redrive.CheckFilter(ctx, s, f); err != nil {
				t.Errorf("CheckFilter(%+v) = %v", f, err)
			}
		}
		for _, f := range []redrive.ItemFilter{
			{Class: "fnal"}, {Stage: "llm-call"}, {RunID: run.ID, Stage: "llm-call"}, {Pipeline: "nope"}, {RunID: run.ID, Pipeline: "q"},
			{Fingerprint: "no such cause"}, {ActionID: act + 1},
		} {
			if err := redrive.CheckFilter(ctx, s, f); !errors.Is(err, redrive.ErrBadFilter) {
				t.Errorf("CheckFilter(%+v) = %v, want ErrBadFilter", f, err)
			}
		}
		var fe *redrive.FilterError
		if err := redrive.CheckFilter(ctx, s, redrive.ItemFilter{Fingerprint: "no such cause"}); !errors.As(err, &fe) || fe.Field != "fingerprint" {
			t.Errorf("CheckFilter(unknown cause) = %v, want a FilterError naming fingerprint", err)
		}
		if err := redrive.CheckFilter(ctx, s, redrive.ItemFilter{RunID: run.ID + 41}); !errors.Is(err, redrive.ErrNotFound) {
			t.Errorf("CheckFilter(missing run) = %v, want ErrNotFound", err)
		}
	})
}
