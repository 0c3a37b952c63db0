package web_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
)

// resultsRun adds a run "results" of n items to f's store: item i ends
// succeeded with the JSON output {"n":i} when i%3 == 0, succeeded with the
// text output "line i\n" (not JSON) when i%3 == 1, and dead when i%3 == 2.
func resultsRun(t *testing.T, f *fixture, n int) int64 {
	t.Helper()
	return seedRun(t, f.store, "results", n, func(i int, l redrive.Lease) redrive.Completion {
		c := redrive.Completion{ItemID: l.Item.ID, Token: l.Token, Stage: "fetch", Attempt: 1, Now: t0,
			Record: redrive.Attempt{Stage: "fetch", Number: 1, StartedAt: t0, FinishedAt: t0}}
		switch i % 3 {
		case 0:
			c.State, c.Record.Outcome, c.Payload = redrive.StateSucceeded, redrive.OutcomeSucceeded, fmt.Appendf(nil, `{"n": %d}`, i)
		case 1:
			c.State, c.Record.Outcome, c.Payload = redrive.StateSucceeded, redrive.OutcomeSucceeded, fmt.Appendf(nil, "line %d\n", i)
		default:
			c.State, c.Record.Outcome, c.Record.Class, c.Record.Error = redrive.StateDead, redrive.OutcomeDead, "final", "bad input"
			c.Reason = &redrive.Reason{Stage: "fetch", Class: "final", Error: "bad input", Attempts: 1, At: t0}
		}
		return c
	})
}

// keyIndex is i of the key "results-%03d".
func keyIndex(t *testing.T, key string) int {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(key, "results-"))
	if err != nil {
		t.Fatalf("key %q", key)
	}
	return i
}

// checkOutput checks that an output and its encoding stand for item i's.
func checkOutput(t *testing.T, i int, out json.RawMessage, enc string) {
	t.Helper()
	switch i % 3 {
	case 0:
		if enc != "json" || string(out) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Errorf("item %d: output %s (%s), want the JSON {\"n\":%d}", i, out, enc, i)
		}
	case 1:
		var s string
		if enc != "base64" || json.Unmarshal(out, &s) != nil {
			t.Fatalf("item %d: output %s (%s), want a base64 string", i, out, enc)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || string(b) != fmt.Sprintf("line %d\n", i) {
			t.Errorf("item %d: output decodes to %q, %v", i, b, err)
		}
	default:
		t.Errorf("item %d is dead but has output %s", i, out)
	}
}

// TestItemsWithOutputs reads a run's results through the list, a page at
// a time: each succeeded item carries its output, JSON inline and other
// bytes in base64, and nothing else unless asked.
func TestItemsWithOutputs(t *testing.T) {
	f := newFixture(t, web.Options{})
	run := resultsRun(t, f, 450)
	target := fmt.Sprintf("/api/v1/items?run=%d&state=succeeded&include=output&limit=120", run)
	seen, pages := 0, 0
	last := int64(0)
	for cursor := ""; ; pages++ {
		r := f.get(t, target+cursor)
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", target+cursor, r.code, r.body)
		}
		var p struct {
			Data       []map[string]json.RawMessage `json:"data"`
			NextCursor string                       `json:"next_cursor"`
		}
		r.json(t, &p)
		for _, it := range p.Data {
			var id int64
			var key, enc string
			_ = json.Unmarshal(it["id"], &id)
			_ = json.Unmarshal(it["key"], &key)
			_ = json.Unmarshal(it["output_encoding"], &enc)
			if id <= last {
				t.Fatalf("item %d after %d: not in ID order", id, last)
			}
			last = id
			checkOutput(t, keyIndex(t, key), it["output"], enc)
			for _, absent := range []string{"payload", "input", "payload_encoding", "input_encoding"} {
				if _, ok := it[absent]; ok {
					t.Errorf("item %s has %s without include", key, absent)
				}
			}
			seen++
		}
		if p.NextCursor == "" {
			break
		}
		cursor = "&cursor=" + p.NextCursor
	}
	if seen != 300 || pages != 2 {
		t.Errorf("read %d succeeded items in %d pages, want 300 in 3", seen, pages+1)
	}

	// include=payload,input: a Go client decodes the items, JSON and
	// base64 alike, into redrive.Item.
	p := f.items(t, fmt.Sprintf("/api/v1/items?run=%d&include=payload,input&limit=3", run))
	for _, it := range p.Data {
		i := keyIndex(t, it.Key)
		if want := fmt.Sprintf(`{"doc":%d}`, i); string(it.Input) != want {
			t.Errorf("item %d: input %q, want %q", i, it.Input, want)
		}
		want := map[int]string{0: fmt.Sprintf(`{"n": %d}`, i), 1: fmt.Sprintf("line %d\n", i), 2: fmt.Sprintf(`{"doc":%d}`, i)}[i%3]
		if i%3 == 0 {
			want = fmt.Sprintf(`{"n":%d}`, i) // JSON travels compacted
		}
		if string(it.Payload) != want {
			t.Errorf("item %d: payload %q, want %q", i, it.Payload, want)
		}
	}
	if r := f.get(t, "/api/v1/items?include=attempts"); r.code != http.StatusBadRequest {
		t.Errorf("include=attempts: %d, want 400", r.code)
	} else if _, field := r.apiErr(t, http.StatusBadRequest); field != "include" {
		t.Errorf("include=attempts: field %q, want include", field)
	}

	// The item's page says the same, output and payload alike.
	text := p.Data[1]
	var d struct {
		Item           map[string]json.RawMessage `json:"item"`
		Output         json.RawMessage            `json:"output"`
		OutputEncoding string                     `json:"output_encoding"`
	}
	f.get(t, fmt.Sprintf("/api/v1/items/%d", text.ID)).json(t, &d)
	checkOutput(t, 1, d.Output, d.OutputEncoding)
	if string(d.Item["payload_encoding"]) != `"base64"` || string(d.Item["input_encoding"]) != `"json"` ||
		string(d.Item["input"]) != `{"doc":1}` {
		t.Errorf("item detail = %v", d.Item)
	}
}

// ndjsonLines reads a response of JSON lines.
func ndjsonLines(t *testing.T, body []byte) []map[string]json.RawMessage {
	t.Helper()
	var out []map[string]json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestRunItemsNDJSON exports a run's results over a real server as JSON
// lines, across several pages of the store, and resumes an export.
func TestRunItemsNDJSON(t *testing.T) {
	f := newFixture(t, web.Options{})
	run := resultsRun(t, f, 900) // 600 succeeded: three pages of the export
	srv := httptest.NewServer(f.h)
	defer srv.Close()
	get := func(q string) []map[string]json.RawMessage {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("%s/api/v1/runs/%d/items.ndjson%s", srv.URL, run, q))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(resp.Body); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
			t.Fatalf("GET %s: %d %s %s", q, resp.StatusCode, resp.Header.Get("Content-Type"), buf.Bytes())
		}
		return ndjsonLines(t, buf.Bytes())
	}
	lines := get("")
	if len(lines) != 600 {
		t.Fatalf("%d lines, want the 600 succeeded items", len(lines))
	}
	last := int64(0)
	for _, l := range lines {
		var id int64
		var key, enc, state string
		_ = json.Unmarshal(l["id"], &id)
		_ = json.Unmarshal(l["key"], &key)
		_ = json.Unmarshal(l["state"], &state)
		_ = json.Unmarshal(l["output_encoding"], &enc)
		if id <= last || state != "succeeded" {
			t.Fatalf("line %d (%s) after %d", id, state, last)
		}
		last = id
		checkOutput(t, keyIndex(t, key), l["output"], enc)
	}

	// Resume after the 250th line, for 100 lines.
	var after int64
	_ = json.Unmarshal(lines[249]["id"], &after)
	more := get(fmt.Sprintf("?after=%d&limit=100", after))
	if len(more) != 100 || string(more[0]["id"]) != string(lines[250]["id"]) || string(more[99]["id"]) != string(lines[349]["id"]) {
		t.Errorf("resumed export: %d lines from %s, want 100 from %s", len(more), more[0]["id"], lines[250]["id"])
	}

	dead := get("?state=dead&include=input")
	if len(dead) != 300 {
		t.Fatalf("%d dead lines, want 300", len(dead))
	}
	var reason redrive.Reason
	if err := json.Unmarshal(dead[0]["reason"], &reason); err != nil || reason.Error != "bad input" {
		t.Errorf("dead line's reason = %s", dead[0]["reason"])
	}
	if _, ok := dead[0]["output"]; ok || string(dead[0]["input"]) != `{"doc":2}` {
		t.Errorf("dead line = %v, want no output and its input", dead[0])
	}
}

// runPolls is a real store that reports each GetRun of one run, so that a
// test knows when a waiting request polls.
type runPolls struct {
	redrive.Store
	run   atomic.Int64
	polls chan struct{}
}

func (s *runPolls) GetRun(ctx context.Context, id int64) (redrive.Run, error) {
	if id == s.run.Load() {
		select {
		case s.polls <- struct{}{}:
		default:
		}
	}
	return s.Store.GetRun(ctx, id)
}

// waitPolling waits until the store has seen n reads of the run.
func waitPolling(t *testing.T, s *runPolls, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for range n {
		select {
		case <-s.polls:
		case <-deadline:
			t.Fatal("the waiting request does not poll its run")
		}
	}
}

type waitResult struct {
	status  redrive.RunStatus
	code    int
	err     error
	elapsed time.Duration
}

func getRunWait(url string) <-chan waitResult {
	c := make(chan waitResult, 1)
	go func() {
		start := time.Now()
		resp, err := http.Get(url)
		if err != nil {
			c <- waitResult{err: err, elapsed: time.Since(start)}
			return
		}
		defer resp.Body.Close()
		var d struct {
			Run redrive.Run `json:"run"`
		}
		err = json.NewDecoder(resp.Body).Decode(&d)
		c <- waitResult{status: d.Run.Status, code: resp.StatusCode, err: err, elapsed: time.Since(start)}
	}()
	return c
}

// TestRunWait waits for a run over a real server: the answer comes when the
// run finishes, not at the wait's end; a wait that ends first answers the
// run as it is; waits are capped; a shutdown answers waiting requests.
func TestRunWait(t *testing.T) {
	f := newFixture(t, web.Options{})
	ctx := context.Background()
	store := &runPolls{Store: f.store, polls: make(chan struct{})}
	store.run.Store(f.mailRun)
	h := web.NewHandler(store, web.Options{WaitPollInterval: 20 * time.Millisecond, MaxWait: 2 * time.Second})
	sctx, stop := context.WithCancel(ctx)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- web.ServeListener(sctx, ln, h) }()
	base := fmt.Sprintf("http://%s/api/v1/runs/%d", ln.Addr(), f.mailRun)

	// A wait longer than MaxWait (2s) is cut to it.
	r := <-getRunWait(base + "?wait=10m")
	if r.err != nil || r.code != http.StatusOK || r.status != redrive.RunRunning {
		t.Fatalf("capped wait: %+v", r)
	}
	if r.elapsed < 2*time.Second || r.elapsed > 9*time.Second {
		t.Errorf("wait=10m answered after %v, want the 2s cap", r.elapsed)
	}

	// The run finishes while the request waits: answered then.
	waiting := getRunWait(base + "?wait=2s")
	waitPolling(t, store, 3)
	if ok, err := f.store.FinishRun(ctx, f.mailRun, redrive.RunAborted, "test", t0); err != nil || !ok {
		t.Fatalf("FinishRun: %v %v", ok, err)
	}
	r = <-waiting
	if r.err != nil || r.status != redrive.RunAborted {
		t.Fatalf("wait across the run's end: %+v", r)
	}
	if r.elapsed >= 2*time.Second {
		t.Errorf("answered after %v: at the wait's end, not at the run's", r.elapsed)
	}

	// A finished run is answered at once, however long the wait.
	if r = <-getRunWait(base + "?wait=2s"); r.status != redrive.RunAborted || r.elapsed >= time.Second {
		t.Errorf("finished run with wait: %+v", r)
	}

	// A shutdown answers a waiting request at once with the run as it is,
	// instead of holding the shutdown up until its timeout.
	docs := fmt.Sprintf("http://%s/api/v1/runs/%d?wait=60s", ln.Addr(), f.docsRun)
	store.run.Store(f.docsRun)
	waiting = getRunWait(docs)
	waitPolling(t, store, 2)
	stopped := time.Now()
	stop()
	r = <-waiting
	if r.err != nil || r.code != http.StatusOK || r.status != redrive.RunRunning {
		t.Fatalf("wait across a shutdown: %+v", r)
	}
	if err := <-served; err != nil {
		t.Fatalf("ServeListener: %v", err)
	}
	if d := time.Since(stopped); d >= web.ShutdownTimeout/2 {
		t.Errorf("shutdown took %v with a waiting request", d)
	}
}
