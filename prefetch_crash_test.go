package redrive_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/sqlite"
)

// leaseChildEnv, when set to "MODE DB", makes the test binary a worker
// process for the lease tests below instead of running tests.
const leaseChildEnv = "REDRIVE_LEASE_CHILD"

// leasePipeline is the pipeline of the lease tests' worker processes. In
// mode "slow" every handler works 2 s; in mode "poison" the item whose
// payload is {"n":0} kills its process as soon as its handler starts, the
// others succeed at once.
func leasePipeline(mode string) redrive.Pipeline {
	h := func(ctx context.Context, it *redrive.Item) ([]byte, error) {
		switch {
		case mode == "slow":
			t := time.NewTimer(2 * time.Second)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-t.C:
			}
		case mode == "poison" && string(it.Payload) == `{"n":0}`:
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return it.Payload, nil
	}
	return redrive.Pipeline{Name: "lease", Stages: []redrive.Stage{{Name: "s", Handle: h, Policy: fast(2)}}}
}

func leaseChild(spec string) int {
	mode, db, _ := strings.Cut(spec, " ")
	ctx := context.Background()
	s, err := sqlite.Open(ctx, db)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p := leasePipeline(mode)
	workers := 2
	switch mode {
	case "slow":
		p.Stages[0].Policy = fast(1)
	case "poison":
		// One worker: no other item runs beside the poison pill, so the
		// deaths it causes are charged to it alone. (An item whose start was
		// recorded and that ran beside it would be charged too: its attempt
		// was running when the process died.)
		workers = 1
	}
	c := redrive.NewClient(s, redrive.Config{Workers: workers, LeaseDuration: time.Second,
		RescueInterval: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond, RunCheckInterval: 20 * time.Millisecond})
	if err := c.Register(p); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := c.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {} // until killed
}

func startLeaseChild(t *testing.T, mode, db string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), leaseChildEnv+"="+mode+" "+db)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// A worker process with 2 workers and 2-second handlers is SIGKILLed while
// both handlers run. It held leases for its running handlers and a small
// prefetch only, and only the attempts that were running are charged: with
// one attempt allowed, the items that die are those two, dead as lost from
// their recorded start; every other item succeeds without an attempt
// charged. (A process used to lease Workers + 2 × ClaimBatch items, and
// every one of them died lost.)
func TestSIGKILLChargesOnlyRunningAttempts(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lease.db")
	s, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	setup := redrive.NewClient(s, redrive.Config{})
	if err := setup.Register(leasePipeline("slow")); err != nil {
		t.Fatal(err)
	}
	const n = 30
	run, err := setup.StartRun(ctx, "lease", items(n), redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	child := startLeaseChild(t, "slow", db)
	// Wait until both handlers run and their starts are recorded.
	var running []redrive.Item
	waitFor(t, "two recorded starts", func() bool {
		its, err := s.ListItems(ctx, redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StateRunning}, Limit: n})
		if err != nil {
			t.Fatal(err)
		}
		running = running[:0]
		started := 0
		for _, it := range its {
			running = append(running, it)
			if !it.AttemptStartedAt.IsZero() {
				started++
			}
		}
		return started == 2
	})
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	starts := map[int64]time.Time{}
	for _, it := range running {
		if !it.AttemptStartedAt.IsZero() {
			starts[it.ID] = it.AttemptStartedAt
		}
	}
	t.Logf("at the kill: %d leases held, %d with a recorded start", len(running), len(starts))
	if len(running) > 2+3 {
		t.Errorf("a process with 2 workers of 2-second handlers held %d leases; want its running items and a prefetch of at most 3", len(running))
	}

	// Another process (fast handlers) rescues and finishes the run.
	p := leasePipeline("fast")
	p.Stages[0].Policy = fast(1)
	cfg := testConfig(nil)
	c := startClient(t, s, cfg, p)
	r := wait(t, c, run)
	if r.Counts.Dead != len(starts) || r.Counts.Succeeded != n-len(starts) {
		t.Fatalf("counts %+v; want exactly the %d running items dead", r.Counts, len(starts))
	}
	dead, err := s.ListItems(ctx, redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StateDead}, Limit: n})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range dead {
		began, ok := starts[it.ID]
		if !ok || it.Reason == nil || it.Reason.Class != redrive.ClassLost {
			t.Fatalf("item %d dead (%+v); it was not running at the kill", it.ID, it.Reason)
		}
		atts, _ := s.Attempts(ctx, it.ID)
		if len(atts) != 1 || atts[0].Outcome != redrive.OutcomeLost || !atts[0].StartedAt.Equal(began) {
			t.Fatalf("item %d history %+v; want one lost attempt started at %v", it.ID, atts, began)
		}
	}
	ok, err := s.ListItems(ctx, redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StateSucceeded}, Limit: n})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range ok {
		atts, _ := s.Attempts(ctx, it.ID)
		if len(atts) != 1 || atts[0].Number != 1 {
			t.Fatalf("succeeded item %d history %+v; want one attempt, nothing charged for the kill", it.ID, atts)
		}
	}
}

// An item whose handler kills its process still dies within its attempts:
// its first loss, with no start recorded, costs no attempt, but from then on
// its start is recorded before the handler runs, and each death is charged.
// Every other item succeeds.
func TestPoisonPillDiesWithinItsAttempts(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "poison.db")
	s, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	setup := redrive.NewClient(s, redrive.Config{})
	if err := setup.Register(leasePipeline("poison")); err != nil {
		t.Fatal(err)
	}
	const n = 20
	run, err := setup.StartRun(ctx, "lease", items(n), redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deaths := 0
	for {
		r, err := s.GetRun(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != redrive.RunRunning {
			break
		}
		if deaths > 6 {
			t.Fatalf("the poison pill killed %d processes and the run goes on: %+v", deaths, r.Counts)
		}
		child := startLeaseChild(t, "poison", db)
		done := make(chan struct{})
		go func() { _ = child.Wait(); close(done) }()
		// The child dies by the poison pill, or the run finishes.
		finished := false
		for !finished {
			select {
			case <-done:
				deaths++
				finished = true
			case <-time.After(20 * time.Millisecond):
				if r, _ := s.GetRun(ctx, run.ID); r.Status != redrive.RunRunning {
					_ = child.Process.Kill()
					<-done
					finished = true
				}
			}
		}
	}
	r, _ := s.GetRun(ctx, run.ID)
	checkCounts(t, r.Counts)
	its, _ := s.ListItems(ctx, redrive.ItemFilter{RunID: run.ID, Limit: n})
	for _, it := range its {
		atts, _ := s.Attempts(ctx, it.ID)
		if string(it.Input) == `{"n":0}` {
			if it.State != redrive.StateDead || it.Reason.Class != redrive.ClassLost || len(atts) != 2 || it.LeaseLosses < 1 {
				t.Fatalf("poison pill: state %s, reason %+v, %d attempts, %d lease losses; want dead lost after 2 charged attempts",
					it.State, it.Reason, len(atts), it.LeaseLosses)
			}
			t.Logf("poison pill dead after %d deaths: %d charged attempts, %d lease losses", deaths, len(atts), it.LeaseLosses)
			continue
		}
		if it.State != redrive.StateSucceeded {
			t.Fatalf("item %s: %s %+v; want succeeded", it.Payload, it.State, it.Reason)
		}
	}
	if r.Counts.Dead != 1 || r.Counts.Succeeded != n-1 {
		t.Fatalf("counts %+v; want the poison pill dead and the rest succeeded", r.Counts)
	}
}
