package redrive_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/postgres"
	"github.com/redrive/redrive/sqlite"
)

// crashChildEnv, when set to a database path, makes the test binary a
// worker process for TestCrashRecovery instead of running tests.
const crashChildEnv = "REDRIVE_CRASH_CHILD_DB"

func TestMain(m *testing.M) {
	if db := os.Getenv(crashChildEnv); db != "" {
		os.Exit(crashChild(db, os.Getenv("REDRIVE_CRASH_LEDGER")))
	}
	if spec := os.Getenv(leaseChildEnv); spec != "" {
		os.Exit(leaseChild(spec))
	}
	if spec := os.Getenv(flowChildEnv); spec != "" {
		os.Exit(flowChild(spec))
	}
	os.Exit(m.Run())
}

// crashPipeline has two stages; each success appends "item stage" to the
// ledger before the engine records it, so a crash between the two shows
// as a repeated ledger line.
func crashPipeline(ledger *os.File) redrive.Pipeline {
	var mu sync.Mutex
	stage := func(name string) redrive.Handler {
		return func(_ context.Context, it *redrive.Item) ([]byte, error) {
			time.Sleep(3 * time.Millisecond) // some work, so that kills land mid-run
			mu.Lock()
			defer mu.Unlock()
			if _, err := fmt.Fprintf(ledger, "%d %s\n", it.ID, name); err != nil {
				return nil, err
			}
			return append(it.Payload, name...), nil
		}
	}
	return redrive.Pipeline{Name: "crash", Stages: []redrive.Stage{
		{Name: "one", Handle: stage("one"), Policy: fast(10)},
		{Name: "two", Handle: stage("two"), Policy: fast(10)},
	}}
}

// openSpec opens "postgres:SCHEMA:URL" or a SQLite path.
func openSpec(ctx context.Context, spec string) (redrive.Store, error) {
	if rest, ok := strings.CutPrefix(spec, "postgres:"); ok {
		schema, url, _ := strings.Cut(rest, ":")
		return postgres.Open(ctx, url, postgres.Options{Schema: schema})
	}
	return sqlite.Open(ctx, spec)
}

func crashChild(db, ledgerPath string) int {
	ctx := context.Background()
	s, err := openSpec(ctx, db)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ledger, err := os.OpenFile(ledgerPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c := redrive.NewClient(s, redrive.Config{Workers: 16, LeaseDuration: 500 * time.Millisecond,
		RescueInterval: 100 * time.Millisecond, PollInterval: 10 * time.Millisecond, RunCheckInterval: 50 * time.Millisecond})
	if err := c.Register(crashPipeline(ledger)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := c.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {} // until killed
}

// TestCrashRecovery kills a worker process with SIGKILL at random points
// and restarts it; the run completes, every item is accounted for, and no
// stage success is recorded twice.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test in -short mode")
	}
	dir := t.TempDir()
	db, ledgerPath := filepath.Join(dir, "crash.db"), filepath.Join(dir, "ledger")
	const n = 3000
	ctx := context.Background()
	s, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	setup := redrive.NewClient(s, redrive.Config{})
	if err := setup.Register(crashPipeline(nil)); err != nil {
		t.Fatal(err)
	}
	run, err := setup.StartRun(ctx, "crash", items(n), redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+db, "REDRIVE_CRASH_LEDGER="+ledgerPath)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	rng := rand.New(rand.NewPCG(2026, 11))
	kills := 0
	for range 6 {
		cmd := start()
		// Kill it while it holds leases, at a random point after that.
		waitHolding(t, s, cmd, run.ID)
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond) // a random kill point, not a wait
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		kills++
		r, _ := s.GetRun(ctx, run.ID)
		t.Logf("killed worker %d: %+v", kills, r.Counts)
	}
	cmd := start()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	r, err := setup.WaitRun(wctx, run.ID)
	if err != nil {
		t.Fatalf("run did not finish after the crashes: %v %+v", err, r.Counts)
	}
	checkCounts(t, r.Counts)
	if r.Status != redrive.RunCompleted || r.Counts.Succeeded != n || r.Counts.Total != n {
		t.Fatalf("run %s %+v, want all %d succeeded", r.Status, r.Counts, n)
	}

	lost, repeated, losses := verifyLedger(t, s, run.ID, n, ledgerPath)
	t.Logf("%d kills: %d lost attempts rescued, %d leases returned unstarted, %d stage executions repeated after a crash", kills, lost, losses, repeated)
	if lost+losses == 0 {
		t.Fatal("no lease was lost: the kills did not hit leased work, so the test proved nothing")
	}
}

// waitHolding returns once the worker process cmd holds a lease of run
// (its owner name holds its process ID), so that killing it interrupts
// work, or once the run has nothing left to work.
func waitHolding(t *testing.T, s redrive.Store, cmd *exec.Cmd, runID int64) {
	t.Helper()
	ctx := context.Background()
	pid := ":" + strconv.Itoa(cmd.Process.Pid) + ":"
	waitFor(t, "worker "+pid+" to hold a lease", func() bool {
		its, err := s.ListItems(ctx, redrive.ItemFilter{RunID: runID, States: []redrive.State{redrive.StateRunning}, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range its {
			if strings.Contains(it.LeaseOwner, pid) {
				return true
			}
		}
		r, err := s.GetRun(ctx, runID)
		return err == nil && r.Counts.Pending+r.Counts.Running == 0
	})
}

// verifyLedger checks the run's items against the handlers' ledger: every
// stage of every item succeeded exactly once in the store, its handler ran,
// and it ran more than once only where the store recorded a lost attempt
// at that stage (the worker died after the handler, before the result was
// written). It returns the lost attempts and the repeated executions.
//
// A stage's handler runs once more than its recorded runs only for a lease
// lost with its process: a lost attempt when its start was recorded, a
// lease loss (Item.LeaseLosses) when it was not.
func verifyLedger(t *testing.T, s redrive.Store, runID int64, n int, ledgerPath string) (lost, repeated, losses int) {
	t.Helper()
	ctx := context.Background()
	f, err := os.Open(ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ran := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ran[sc.Text()]++
	}
	its, err := s.ListItems(ctx, redrive.ItemFilter{RunID: runID, Limit: n})
	if err != nil || len(its) != n {
		t.Fatalf("list: %d %v", len(its), err)
	}
	for _, it := range its {
		atts, err := s.Attempts(ctx, it.ID)
		if err != nil {
			t.Fatal(err)
		}
		succ := map[string]int{}
		lostAt := map[string]int{}
		for _, a := range atts {
			switch a.Outcome {
			case redrive.OutcomeSucceeded:
				succ[a.Stage]++
			case redrive.OutcomeLost:
				lostAt[a.Stage]++
				lost++
			}
		}
		extraRuns := 0
		for _, st := range []string{"one", "two"} {
			if succ[st] != 1 {
				t.Fatalf("item %d stage %s: %d successes recorded, want exactly 1 (%+v)", it.ID, st, succ[st], atts)
			}
			k := strconv.FormatInt(it.ID, 10) + " " + st
			if ran[k] < 1 {
				t.Fatalf("item %d stage %s succeeded in the store but its handler never ran", it.ID, st)
			}
			extra := ran[k] - 1
			extraRuns += extra - lostAt[st]
			repeated += extra
		}
		if extraRuns > it.LeaseLosses {
			t.Fatalf("item %d ran %d times more than its lost attempts account for, with only %d lease losses (ledger %d, %d; %+v)",
				it.ID, extraRuns, it.LeaseLosses, ran[strconv.FormatInt(it.ID, 10)+" one"], ran[strconv.FormatInt(it.ID, 10)+" two"], atts)
		}
		losses += it.LeaseLosses
		if !strings.HasSuffix(string(it.Payload), "onetwo") {
			t.Fatalf("item %d payload %q", it.ID, it.Payload)
		}
	}
	return lost, repeated, losses
}
