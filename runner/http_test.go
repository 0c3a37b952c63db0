package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive/runner"
)

type connCounter struct {
	net.Listener
	n *atomic.Int64
}

func (l connCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestHTTPStageReusesConnections: an http stage with 16 workers, whose server answers
// the first request of one item in ten 500 with a body (the error path), opens at most 2
// connections per worker for 300 items.
//
// The server fails items, not every tenth call: with every tenth call failing, a few
// items retrying in step near the end of the run could meet the failing turn on each
// attempt, and one died of five 500s in a row under the race detector.
func TestHTTPStageReusesConnections(t *testing.T) {
	const workers, items = 16, 300
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns, calls atomic.Int64
	var failed sync.Map // items whose first call was answered 500
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ N int }
		_ = json.NewDecoder(r.Body).Decode(&in)
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(5 * time.Millisecond) // the work: keeps the workers' calls overlapping
		calls.Add(1)
		if _, again := failed.LoadOrStore(in.N, true); in.N%10 == 0 && !again {
			w.WriteHeader(500)
			io.WriteString(w, `{"error":"`+strings.Repeat("e", 8<<10)+`"}`)
			return
		}
		io.WriteString(w, `{"ok":true,"pad":"`+strings.Repeat("x", 8<<10)+`"}`)
	})}
	go func() { _ = srv.Serve(connCounter{ln, &conns}) }()
	t.Cleanup(func() { srv.Close() })

	dir := t.TempDir()
	yaml := fmt.Sprintf(`name: calls
workers: %d
stages:
  - name: call
    http:
      method: POST
      url: "http://%s/v1"
    retry: {max_attempts: 5, base: 10ms, max_delay: 50ms}
`, workers, ln.Addr())
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	for i := range items {
		fmt.Fprintf(&in, `{"id":"i%d","n":%d}`+"\n", i, i)
	}
	if err := os.WriteFile(filepath.Join(dir, "items.jsonl"), []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := runner.LoadFile(filepath.Join(dir, "p.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := runner.Execute(context.Background(), spec, runner.Options{Input: filepath.Join(dir, "items.jsonl"), DB: "sqlite:" + filepath.Join(dir, "r.db")})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Counts.Succeeded != items {
		t.Fatalf("counts %+v; dead by class %v; error groups %+v", sum.Counts, sum.DeadByClass, sum.ErrorGroups)
	}
	if c := calls.Load(); c != items+items/10 {
		t.Errorf("%d calls, want %d: one per item and one retry for each item failed once", c, items+items/10)
	}
	if c := conns.Load(); c > 2*workers {
		t.Errorf("%d connections for %d workers, want <= %d", c, workers, 2*workers)
	}
	t.Logf("%d connections, %d calls for %d items", conns.Load(), calls.Load(), items)
}
