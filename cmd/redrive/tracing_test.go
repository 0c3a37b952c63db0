package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/redrive/redrive"
)

// exportedSpan is a span as an OTLP receiver got it.
type exportedSpan struct {
	traceID, spanID, parentID string
	name                      string
	service                   string
	attrs                     map[string]string
	status                    tracepb.Status_StatusCode
	statusMsg                 string
}

// otlpReceiver is an OTLP/HTTP trace receiver on loopback: it decodes each
// ExportTraceServiceRequest (protobuf, gzip or not) and keeps its spans.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []exportedSpan
	posts int
	bad   []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(msg string) {
			rc.mu.Lock()
			rc.bad = append(rc.bad, msg)
			rc.mu.Unlock()
			http.Error(w, msg, http.StatusBadRequest)
		}
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			fail(r.Method + " " + r.URL.Path)
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
			fail("content type " + ct)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				fail(err.Error())
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			fail(err.Error())
			return
		}
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			fail(err.Error())
			return
		}
		var got []exportedSpan
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					e := exportedSpan{traceID: hex.EncodeToString(sp.GetTraceId()), spanID: hex.EncodeToString(sp.GetSpanId()),
						parentID: hex.EncodeToString(sp.GetParentSpanId()), name: sp.GetName(), service: service,
						attrs: map[string]string{}, status: sp.GetStatus().GetCode(), statusMsg: sp.GetStatus().GetMessage()}
					for _, kv := range sp.GetAttributes() {
						v := kv.GetValue()
						if _, ok := v.GetValue().(*commonpb.AnyValue_IntValue); ok {
							e.attrs[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
						} else {
							e.attrs[kv.GetKey()] = v.GetStringValue()
						}
					}
					got = append(got, e)
				}
			}
		}
		rc.mu.Lock()
		rc.spans = append(rc.spans, got...)
		rc.posts++
		rc.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// named returns the received spans of name, each item's in attempt order.
func (rc *otlpReceiver) named(name string) []exportedSpan {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []exportedSpan
	for _, s := range rc.spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

// traceparentParts splits a traceparent into its trace and span IDs.
func traceparentParts(t *testing.T, tp string) (traceID, spanID string) {
	t.Helper()
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 {
		t.Fatalf("traceparent %q is not a W3C traceparent", tp)
	}
	return parts[1], parts[2]
}

const tracedPipeline = `name: traced
stages:
  - name: call
    http:
      url: ${CALLED_URL}
    rate_limit: off
    retry: {max_attempts: 3, base: 50ms, max_delay: 100ms}
  - name: work
    external: true
    retry: {max_attempts: 3, base: 50ms}
`

// TestServeExportsTraces runs `redrive serve --otlp-endpoint` against an
// OTLP/HTTP receiver of the test's own. A submit with a traceparent header
// makes its items' attempts spans of that trace: the http stage's server
// gets each attempt's span as its request's parent (the first attempt of
// one item fails, and its span says so), an external worker's lease carries
// the external attempt's span, and the Python worker library hands it to
// its handler. The exported spans reach the receiver with their attributes.
func TestServeExportsTraces(t *testing.T) {
	t.Parallel()
	rc := newOTLPReceiver(t)

	type call struct {
		n           int
		traceparent string
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	called := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in map[string]any
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n := int(in["n"].(float64))
		mu.Lock()
		first := true
		for _, c := range calls {
			first = first && c.n != n
		}
		calls = append(calls, call{n: n, traceparent: r.Header.Get("Traceparent")})
		mu.Unlock()
		if n == 1 && first {
			http.Error(w, "warming up", http.StatusInternalServerError)
			return
		}
		in["trace"] = true
		json.NewEncoder(w).Encode(in)
	}))
	defer called.Close()

	dir := t.TempDir()
	db := filepath.Join(dir, "redrive.db")
	file := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(file, []byte(tracedPipeline), 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("worker work,submit,read "+workToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := cleanEnv("CALLED_URL="+called.URL, "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=")
	_, log, url := startServeAt(t, env, "--db", "sqlite:"+db, "serve", "--migrate", "--pipeline", file,
		"--token-file", tokens, "--otlp-endpoint", rc.URL)

	const (
		submitTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		submitSpan  = "00f067aa0ba902b7"
	)
	body, _ := json.Marshal(map[string]any{"items": []any{map[string]any{"input": map[string]any{"n": 1}},
		map[string]any{"input": map[string]any{"n": 2}}}})
	req, _ := http.NewRequest("POST", url+"/api/v1/pipelines/traced/items", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+workToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+submitTrace+"-"+submitSpan+"-01")
	req.Header.Set("Tracestate", "congo=t61rcWkgMzE")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var submitted struct {
		Run redrive.Run `json:"run"`
	}
	json.NewDecoder(resp.Body).Decode(&submitted)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %d", resp.StatusCode)
	}

	// One item's external attempt is leased over the API...
	var leased []map[string]any
	waitFor(t, "an item at the external stage", 60*time.Second, func() bool {
		leased = leaseOne(t, url, "traced", "work", "raw-worker", 1, 5, 30)
		return len(leased) == 1
	}, log.String)
	leaseTP, _ := leased[0]["traceparent"].(string)
	lt, rawSpan := traceparentParts(t, leaseTP)
	if lt != submitTrace || rawSpan == submitSpan {
		t.Fatalf("lease traceparent %q: want a span of the submitted trace %s", leaseTP, submitTrace)
	}
	if ts, _ := leased[0]["tracestate"].(string); ts != "congo=t61rcWkgMzE" {
		t.Errorf("lease tracestate %q, want the submitted one", ts)
	}
	var a settleAnswer
	if code := api(t, "POST", url+"/api/v1/leases/complete", map[string]any{"worker": "raw-worker",
		"results": []any{map[string]any{"id": leased[0]["id"], "token": leased[0]["token"], "output": map[string]any{"raw": true}}}}, &a); code != http.StatusOK {
		t.Fatalf("complete: %d %+v", code, a)
	}
	// ... the other by the Python library, whose handler returns the
	// traceparent it was given.
	pyTP := ""
	if _, err := exec.LookPath("python3"); err == nil || os.Getenv("CI") != "" {
		w := startWorker(t, "python", url, "traced", "work", "2")
		r := waitRunDone(t, url, submitted.Run.ID, 60*time.Second, log.String)
		w.stop(t)
		if r.Counts.Succeeded != 2 {
			t.Fatalf("run %+v: want both items succeeded", r.Counts)
		}
		its, _ := itemsOf(t, db, submitted.Run.ID)
		for _, it := range its {
			var out map[string]any
			json.Unmarshal(it.Payload, &out)
			if out["by"] == "python" {
				pyTP, _ = out["traceparent"].(string)
			}
		}
		if pyTP == "" {
			t.Fatalf("the Python handler got no traceparent (outputs %v)", its)
		}
	} else {
		t.Log("python3 not installed: the Python library's part is skipped")
	}

	// Every attempt's span arrives: 3 http calls (one failed), 2 external.
	waitFor(t, "the exported spans", 30*time.Second, func() bool {
		return len(rc.named("traced/call")) >= 3 && len(rc.named("traced/work")) >= 2
	}, func() string {
		return fmt.Sprintf("received %d call and %d work spans\n%s", len(rc.named("traced/call")), len(rc.named("traced/work")), log.String())
	})
	rc.mu.Lock()
	bad := rc.bad
	rc.mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("the receiver refused exports: %v", bad)
	}

	callSpans := rc.named("traced/call")
	byID := map[string]exportedSpan{}
	for _, s := range callSpans {
		byID[s.spanID] = s
		if s.traceID != submitTrace || s.parentID != submitSpan {
			t.Errorf("call span %s in trace %s under %s: want a child of the submit span %s/%s", s.spanID, s.traceID, s.parentID, submitTrace, submitSpan)
		}
		if s.service != "redrive" || s.attrs["redrive.pipeline"] != "traced" || s.attrs["redrive.stage"] != "call" ||
			s.attrs["redrive.item.id"] == "" || s.attrs["redrive.run.id"] != fmt.Sprint(submitted.Run.ID) || s.attrs["redrive.worker"] == "" {
			t.Errorf("call span: service %q, attributes %v", s.service, s.attrs)
		}
	}
	mu.Lock()
	got := append([]call(nil), calls...)
	mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("the called server got %d requests, want 3 (item 1 twice)", len(got))
	}
	failedSeen := false
	for _, c := range got {
		tr, parent := traceparentParts(t, c.traceparent)
		s, ok := byID[parent]
		if tr != submitTrace || !ok {
			t.Fatalf("request of item n=%d carried traceparent %q: want an attempt span of the submitted trace", c.n, c.traceparent)
		}
		if s.status == tracepb.Status_STATUS_CODE_ERROR {
			failedSeen = true
			if s.attrs["redrive.attempt"] != "1" || s.attrs["redrive.error.class"] != "retryable" || !strings.Contains(s.statusMsg, "500") {
				t.Errorf("failed attempt span: attributes %v, status %q", s.attrs, s.statusMsg)
			}
		}
	}
	if !failedSeen {
		t.Errorf("no http request's parent span has an error status, though item 1's first call failed")
	}

	workSpans := map[string]exportedSpan{}
	for _, s := range rc.named("traced/work") {
		workSpans[s.spanID] = s
		if s.traceID != submitTrace || s.parentID != submitSpan || s.status == tracepb.Status_STATUS_CODE_ERROR {
			t.Errorf("external span %+v: want a successful child of the submit span", s)
		}
	}
	if s, ok := workSpans[rawSpan]; !ok || s.attrs["redrive.worker"] != "raw-worker" || s.attrs["redrive.outcome"] != "succeeded" {
		t.Errorf("the leased span %s was exported as %+v (found %v): want worker raw-worker, succeeded", rawSpan, s, ok)
	}
	if pyTP != "" {
		_, pySpan := traceparentParts(t, pyTP)
		if _, ok := workSpans[pySpan]; !ok {
			t.Errorf("the Python handler's traceparent %q names no exported external attempt span", pyTP)
		}
	}
}

// TestTracerProviderConfig shows when commands export spans: off without
// --otlp-endpoint and the standard variables, on with either, off again
// when OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none says so; a flag that
// is not an http(s) URL is a usage error.
func TestTracerProviderConfig(t *testing.T) {
	for _, k := range []string{envOTLPEndpoint, envOTLPTracesEndpoint, "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
		t.Setenv(k, "")
	}
	logger := slog.New(slog.DiscardHandler)
	on := func(flag string) bool {
		t.Helper()
		tp, stop, err := newTracerProvider(t.Context(), flag, logger)
		if err != nil {
			t.Fatalf("newTracerProvider(%q): %v", flag, err)
		}
		defer stop()
		return tp != nil
	}
	if on("") {
		t.Errorf("tracing on without an endpoint")
	}
	if !on("http://127.0.0.1:4318") {
		t.Errorf("tracing off with --otlp-endpoint")
	}
	t.Setenv(envOTLPTracesEndpoint, "http://127.0.0.1:4318/v1/traces")
	if !on("") {
		t.Errorf("tracing off with %s set", envOTLPTracesEndpoint)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	if on("") {
		t.Errorf("tracing on with OTEL_TRACES_EXPORTER=none")
	}
	for _, bad := range []string{"127.0.0.1:4318", "ftp://x", "http://"} {
		if _, _, err := newTracerProvider(t.Context(), bad, logger); err == nil {
			t.Errorf("--otlp-endpoint %q accepted", bad)
		}
	}
}
