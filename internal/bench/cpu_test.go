package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive/internal/pgtest"
)

// burnEnv, when set to a PostgreSQL URL, makes this test binary a helper
// process of TestCPUMeterCountsOnlyThisProcessBackends: it burns CPU on a
// backend of its own, in a statement that names the schema in
// burnSchemaEnv, prints how much, and stays connected until its standard
// input ends.
const (
	burnEnv       = "REDRIVE_BENCH_BURN_URL"
	burnSchemaEnv = "REDRIVE_BENCH_BURN_SCHEMA"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(burnEnv); url != "" {
		os.Exit(burnHelper(context.Background(), url, os.Getenv(burnSchemaEnv)))
	}
	os.Exit(m.Run())
}

// burnSQL keeps a backend busy for about a tenth of a second of CPU per
// million rows ($1).
const burnSQL = `SELECT count(*) FROM generate_series(1, $1::bigint)`

// burnHelper runs burnSQL on a new connection to url, with a comment that
// names schema, prints the CPU time its backend spent on it, and waits
// for its standard input to end before it disconnects.
func burnHelper(ctx context.Context, url, schema string) int {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close(ctx)
	d, err := burn(ctx, c, 12_000_000, "/* "+schema+" */")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(int64(d))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// burn runs burnSQL over rows rows, and comment, on c and returns the CPU
// time c's backend spent on it, read from /proc.
func burn(ctx context.Context, c *pgx.Conn, rows int64, comment string) (time.Duration, error) {
	pid := strconv.Itoa(int(c.PgConn().PID()))
	before, ok := procCPU(pid)
	if !ok {
		return 0, fmt.Errorf("backend %s: no CPU time in /proc: is the server on this host?", pid)
	}
	if _, err := c.Exec(ctx, burnSQL+" "+comment, rows); err != nil {
		return 0, err
	}
	after, _ := procCPU(pid)
	return after - before, nil
}

// TestCPUMeterCountsOnlyThisProcessBackends checks the server CPU that the
// benchmarks report: a backend of the store's pool whose statements name
// no schema counts (the meter went by the last statement once, and missed
// it), and a backend of another process on the same database does not,
// even when its statement names the schema.
func TestCPUMeterCountsOnlyThisProcessBackends(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the meter reads /proc")
	}
	url, schema := pgtest.NewSchema(t)
	s := pgtest.OpenStoreAt(t, url, schema)
	ctx := context.Background()
	pc, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	if _, ok := procCPU(strconv.Itoa(int(pc.Conn().PgConn().PID()))); !ok {
		t.Skip("the server's backends are not on this host")
	}
	// The pool's connection last ran a statement that names no schema.
	if _, err := pc.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}

	m := startCPU(ctx, s, schema)
	ours, err := burn(ctx, pc.Conn(), 4_000_000, "")
	if err != nil {
		t.Fatal(err)
	}
	// Another process burns three times as long on a backend of its own,
	// still connected when the meter stops, its last statement naming the
	// schema.
	helper := exec.Command(os.Args[0], "-test.run", "^$")
	helper.Env = append(os.Environ(), burnEnv+"="+url, burnSchemaEnv+"="+schema)
	helper.Stderr = os.Stderr
	stdin, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := helper.Wait(); err != nil {
			t.Errorf("helper process: %v", err)
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper process: %v", err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		t.Fatalf("helper process printed %q", line)
	}
	theirs := time.Duration(ns)
	_, server := m.stop(ctx)

	t.Logf("server CPU counted %v; this process's burn %v, the other process's %v", server, ours, theirs)
	if ours < 5*clockTick || theirs < 5*clockTick {
		t.Fatalf("the burns are too short to tell apart (%v, %v): make burnSQL longer", ours, theirs)
	}
	if server < ours {
		t.Errorf("server CPU %v: less than the pool backend's own burn, %v", server, ours)
	}
	if server >= ours+theirs/2 {
		t.Errorf("server CPU %v: the other process's burn (%v) counted beside this one's (%v)", server, theirs, ours)
	}
}
