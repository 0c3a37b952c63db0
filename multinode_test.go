package redrive_test

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// TestMultiProcessPostgres: three worker processes share one PostgreSQL
// database; one of them is killed with SIGKILL repeatedly and restarted.
// Every item is accounted for and no stage success is recorded twice.
func TestMultiProcessPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test in -short mode")
	}
	url, schema := pgtest.NewSchema(t)
	s := pgtest.OpenStoreAt(t, url, schema)
	ctx := context.Background()
	const n = 20000
	setup := redrive.NewClient(s, redrive.Config{})
	if err := setup.Register(crashPipeline(nil)); err != nil {
		t.Fatal(err)
	}
	run, err := setup.StartRun(ctx, "crash", items(n), redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(t.TempDir(), "ledger")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"=postgres:"+schema+":"+url, "REDRIVE_CRASH_LEDGER="+ledger)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	steady := []*exec.Cmd{start(), start()}
	defer func() {
		for _, c := range steady {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	rng := rand.New(rand.NewPCG(4, 2))
	var victim *exec.Cmd
	kills := 0
	for kills < 5 {
		victim = start()
		waitHolding(t, s, victim, run.ID)
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond) // a random kill point, not a wait
		r, _ := s.GetRun(ctx, run.ID)
		if r.Counts.Pending+r.Counts.Running == 0 {
			break
		}
		_ = victim.Process.Signal(syscall.SIGKILL)
		_ = victim.Wait()
		victim = nil
		kills++
		t.Logf("killed worker %d: %+v", kills, r.Counts)
	}
	if victim != nil {
		steady = append(steady, victim)
	} else {
		steady = append(steady, start())
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	r, err := setup.WaitRun(wctx, run.ID)
	if err != nil {
		t.Fatalf("run did not finish: %v %+v", err, r.Counts)
	}
	checkCounts(t, r.Counts)
	if r.Status != redrive.RunCompleted || r.Counts.Succeeded != n {
		t.Fatalf("run %s %+v", r.Status, r.Counts)
	}
	lost, repeated, losses := verifyLedger(t, s, run.ID, n, ledger)
	t.Logf("%d kills: %d lost attempts rescued, %d leases returned unstarted, %d stage executions repeated after a crash", kills, lost, losses, repeated)
	if kills < 3 {
		t.Fatalf("only %d kills landed before the run finished: the test proved too little", kills)
	}
}

// TestPostgresServerRestart restarts the PostgreSQL server in the middle of
// a run; the workers reconnect and the run completes with nothing lost.
func TestPostgresServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restart test in -short mode")
	}
	url, restart, _ := pgtest.StartCluster(t)
	ctx := context.Background()
	s, err := postgres.Open(ctx, url, postgres.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var calls atomic.Int64
	p := redrive.Pipeline{Name: "restart", Stages: []redrive.Stage{{Name: "s", Policy: fast(10), Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
		calls.Add(1)
		time.Sleep(2 * time.Millisecond)
		return it.Payload, nil
	}}}}
	cfg := testConfig(nil)
	c := startClient(t, s, cfg, p)
	const n = 5000
	run, err := c.StartRun(ctx, "restart", items(n), redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a fifth of the calls", func() bool { return calls.Load() >= n/5 })
	before := calls.Load()
	restart()
	t.Logf("server restarted after %d calls", before)
	r := wait(t, c, run)
	if r.Status != redrive.RunCompleted || r.Counts.Succeeded != n {
		t.Fatalf("after a server restart: %s %+v", r.Status, r.Counts)
	}
	if before >= n {
		t.Fatal("the run finished before the restart: the test proved nothing")
	}
}
