package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// FindBin returns the path of a PostgreSQL server program (initdb, pg_ctl):
// from PATH, else the newest /usr/lib/postgresql/*/bin, else
// /usr/local/pgsql/bin. It returns "" when there is none.
func FindBin(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	dirs = append(dirs, "/usr/local/pgsql/bin")
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return ""
}

func versionOf(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

// Cluster is a throwaway PostgreSQL cluster.
type Cluster struct {
	// URL connects to its database "test" as user postgres.
	URL  string
	Port int
	dir  string
	data string
	asPG bool // run the server programs as the postgres user (we are root)
	mu   sync.Mutex
	done bool
}

// StartCluster starts a throwaway cluster (initdb into a temporary
// directory, trust authentication, a free port, a socket directory of its
// own, fsync off) with a database "test", and removes it when the test
// ends. restart restarts the server (pg_ctl restart -m fast) and returns
// once it accepts connections again; stop stops it. When we are root, the
// server programs run as the postgres user, as they refuse to run as root.
//
// It skips the test when initdb is not installed, except in CI, where it
// fails it.
func StartCluster(t testing.TB) (url string, restart func(), stop func()) {
	t.Helper()
	c, err := NewCluster()
	if err != nil {
		if err == errNoInitdb {
			unavailable(t, "pgtest: %v", err)
		}
		t.Fatalf("pgtest: start cluster: %v", err)
	}
	t.Cleanup(func() { c.Stop() })
	restart = func() {
		t.Helper()
		if err := c.Restart(); err != nil {
			t.Fatalf("pgtest: restart cluster: %v", err)
		}
	}
	return c.URL, restart, func() { c.Stop() }
}

var errNoInitdb = fmt.Errorf("initdb not found in PATH, /usr/lib/postgresql/*/bin or /usr/local/pgsql/bin")

// NewCluster starts a throwaway cluster; Stop removes it.
func NewCluster() (*Cluster, error) {
	initdb, pgctl := FindBin("initdb"), FindBin("pg_ctl")
	if initdb == "" || pgctl == "" {
		return nil, errNoInitdb
	}
	c := &Cluster{asPG: os.Geteuid() == 0}
	dir, err := os.MkdirTemp("", "redrive-pg-")
	if err != nil {
		return nil, err
	}
	c.dir, c.data = dir, filepath.Join(dir, "data")
	if c.asPG {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root and no postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if out, err := c.run(initdb, "-D", c.data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.Port = port
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off", port, dir)
	if out, err := c.run(pgctl, "start", "-w", "-t", "60", "-D", c.data, "-l", filepath.Join(dir, "server.log"), "-o", opts); err != nil {
		c.Stop()
		return nil, fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, c.log())
	}
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := execSQL(context.Background(), admin, `CREATE DATABASE test`); err != nil {
		c.Stop()
		return nil, fmt.Errorf("create database: %w", err)
	}
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable", port)
	return c, nil
}

// Restart restarts the server with pg_ctl restart -m fast and waits until
// it accepts connections.
func (c *Cluster) Restart() error {
	if out, err := c.run(FindBin("pg_ctl"), "restart", "-w", "-t", "60", "-m", "fast", "-D", c.data); err != nil {
		return fmt.Errorf("pg_ctl restart: %w\n%s\n%s", err, out, c.log())
	}
	return nil
}

// Stop stops the server (immediate mode) and removes its directory. It is
// safe to call more than once.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	c.done = true
	c.run(FindBin("pg_ctl"), "stop", "-w", "-m", "immediate", "-D", c.data)
	os.RemoveAll(c.dir)
}

func (c *Cluster) log() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// run runs a server program, as the postgres user when we are root.
func (c *Cluster) run(prog string, args ...string) (string, error) {
	var cmd *exec.Cmd
	if c.asPG {
		if rb, err := exec.LookPath("runuser"); err == nil {
			cmd = exec.Command(rb, append([]string{"-u", "postgres", "--", prog}, args...)...)
		} else {
			quoted := []string{shellQuote(prog)}
			for _, a := range args {
				quoted = append(quoted, shellQuote(a))
			}
			cmd = exec.Command("su", "postgres", "-s", "/bin/sh", "-c", strings.Join(quoted, " "))
		}
	} else {
		cmd = exec.Command(prog, args...)
	}
	cmd.Dir = c.dir
	// The server must not inherit our stdout: pg_ctl start leaves it
	// running, and go test waits for inherited pipes to close.
	f, err := os.CreateTemp("", "redrive-pg-out-")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Stdin = nil
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return "", err
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		err = fmt.Errorf("%s timed out", filepath.Base(prog))
	}
	out, _ := os.ReadFile(f.Name())
	return string(out), err
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func freePort() (int, error) {
	for i := 0; i < 20; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p > 1024 {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port")
}
