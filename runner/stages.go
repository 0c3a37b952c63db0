package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"text/template/parse"
	"time"
	"unicode/utf8"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/retry/retryhttp"
)

// Exit codes of exec stage commands. Any other non-zero code is final.
const (
	// ExitRetryable (EX_TEMPFAIL from sysexits.h) asks for a retry after the
	// policy's backoff.
	ExitRetryable = 75
	// ExitRateLimited asks for a retry after the wait given on stderr as a
	// line "retry-after: 30s" (a Go duration, whole seconds or an HTTP
	// date), or in the stdout JSON field "retry_after" (a duration string or
	// seconds). Rate-limited waits do not consume attempts.
	ExitRateLimited = 76
)

// maxStderr bounds the stderr kept as an exec stage's error message.
const maxStderr = 2 << 10

// maxOutput bounds a stage's output (stdout or response body).
const maxOutput = 64 << 20

// handler builds the handler of a stage.
func (s *Spec) handler(st *StageSpec) (redrive.Handler, error) {
	if err := st.checkEnv(); err != nil {
		return nil, specError(s.File, err)
	}
	switch {
	case st.Exec != nil:
		command, err := s.commandPath(st)
		if err != nil {
			return nil, specError(s.File, err)
		}
		return s.execHandler(st, command), nil
	case st.HTTP != nil:
		h, err := httpHandler(st, s.Workers)
		if err != nil {
			return nil, specError(s.File, err)
		}
		return h, nil
	}
	return nil, specError(s.File, at(st.Pos, "stage %q has neither exec nor http: it cannot run (a policy-only file can only be previewed)", st.Name))
}

// boundedBuffer keeps the first max bytes written and counts the rest.
type boundedBuffer struct {
	max     int
	buf     bytes.Buffer
	dropped int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	room := b.max - b.buf.Len()
	if room >= len(p) {
		b.buf.Write(p)
	} else {
		if room > 0 {
			b.buf.Write(p[:room])
		}
		b.dropped += len(p) - max(room, 0)
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	s := strings.TrimSpace(strings.ToValidUTF8(b.buf.String(), "?"))
	if b.dropped > 0 {
		s += fmt.Sprintf(" …(%d more bytes)", b.dropped)
	}
	return s
}

var retryAfterLine = regexp.MustCompile(`(?im)^\s*retry-after:\s*(.+?)\s*$`)

// parseWait reads a wait written as a Go duration ("30s"), whole seconds
// ("30") or an HTTP date.
func parseWait(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return d, true
	}
	return retryhttp.ParseRetryAfter(v, now)
}

// execHandler runs command, the stage's command resolved by commandPath.
func (s *Spec) execHandler(st *StageSpec, command string) redrive.Handler {
	e := st.Exec
	dir := ""
	if e.Dir != "" {
		dir = expandEnv(e.Dir)
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(s.dir(), dir)
		}
	}
	args := make([]string, len(e.Args))
	for i, a := range e.Args {
		args[i] = expandEnv(a)
	}
	var env []string
	for k, v := range e.Env {
		env = append(env, k+"="+expandEnv(v))
	}
	stage := st.Name
	return func(ctx context.Context, item *redrive.Item) ([]byte, error) {
		cmd := exec.CommandContext(ctx, command, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		cmd.Env = append(cmd.Env,
			"REDRIVE_STAGE="+stage,
			"REDRIVE_ITEM_ID="+strconv.FormatInt(item.ID, 10),
			"REDRIVE_ITEM_KEY="+itemID(item.Key),
			"REDRIVE_RUN_ID="+strconv.FormatInt(item.RunID, 10),
			"REDRIVE_ATTEMPT="+strconv.Itoa(item.Attempt+1),
		)
		cmd.Stdin = bytes.NewReader(item.Payload)
		stdout := &boundedBuffer{max: maxOutput}
		stderr := &boundedBuffer{max: maxStderr}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		// Own process group: a terminal's Ctrl-C reaches the runner only,
		// which lets running attempts finish; a timeout kills the group.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = time.Second
		err := cmd.Run()
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, retry.Retryable(fmt.Errorf("%s: timed out: %w", command, ctx.Err()))
			}
			return nil, ctx.Err()
		}
		if err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, exec.ErrNotFound) {
					return nil, retry.Final(fmt.Errorf("command not found: %s: %w", command, err))
				}
				return nil, retry.Retryable(fmt.Errorf("%s: %w", command, err))
			}
			msg := stderr.String()
			if msg == "" {
				msg = "(no stderr)"
			}
			code := ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return nil, retry.Retryable(fmt.Errorf("killed by %v: %s", ws.Signal(), msg))
			}
			switch code {
			case ExitRetryable:
				return nil, retry.Retryable(fmt.Errorf("exit status %d: %s", code, msg))
			case ExitRateLimited:
				var after time.Duration
				if m := retryAfterLine.FindStringSubmatch(stderr.buf.String()); m != nil {
					after, _ = parseWait(m[1], time.Now())
				} else {
					var v struct {
						RetryAfter json.RawMessage `json:"retry_after"`
					}
					if json.Unmarshal(stdout.buf.Bytes(), &v) == nil && len(v.RetryAfter) > 0 {
						var str string
						if json.Unmarshal(v.RetryAfter, &str) == nil {
							after, _ = parseWait(str, time.Now())
						} else if f, err := strconv.ParseFloat(string(v.RetryAfter), 64); err == nil && f > 0 {
							after = time.Duration(f * float64(time.Second))
						}
					}
				}
				return nil, retry.RateLimited(fmt.Errorf("exit status %d (rate limited): %s", code, msg), after)
			default:
				return nil, retry.Final(fmt.Errorf("exit status %d: %s", code, msg))
			}
		}
		out := bytes.TrimSpace(stdout.buf.Bytes())
		if stdout.dropped > 0 {
			return nil, retry.Final(fmt.Errorf("%s: output larger than %d bytes", command, maxOutput))
		}
		if len(out) == 0 {
			// A command that prints nothing passes its input on unchanged.
			return item.Payload, nil
		}
		if !json.Valid(out) {
			return nil, retry.Final(fmt.Errorf("%s: output is not JSON: %s", filepath.Base(command), snippet(out)))
		}
		return out, nil
	}
}

// snippet returns the start of b for an error message.
func snippet(b []byte) string {
	const n = 200
	if len(b) <= n {
		return strings.ToValidUTF8(string(b), "?")
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return strings.ToValidUTF8(string(b[:cut]), "?") + "…"
}

// compile checks and compiles an http stage's templates.
func (h *HTTPSpec) compile(stage string) error {
	if h.Method == "" {
		h.Method = http.MethodPost
	}
	h.Method = strings.ToUpper(h.Method)
	if !regexp.MustCompile(`^[A-Z]+$`).MatchString(h.Method) {
		return at(keyPos(h.Keys, "method", h.Pos), "stage %q: invalid method %q", stage, h.Method)
	}
	if strings.TrimSpace(h.URL) == "" {
		return at(keyPos(h.Keys, "url", h.Pos), "stage %q: http needs a url", stage)
	}
	var err error
	if h.url, err = template.New("url").Funcs(funcs).Option("missingkey=error").Parse(h.URL); err != nil {
		return at(keyPos(h.Keys, "url", h.Pos), "stage %q: url template: %v", stage, err)
	}
	if h.Body != nil {
		if h.body, err = template.New("body").Funcs(funcs).Option("missingkey=error").Parse(*h.Body); err != nil {
			return at(keyPos(h.Keys, "body", h.Pos), "stage %q: body template: %v", stage, err)
		}
	}
	switch h.Output {
	case "":
		h.Output = "body"
	case "body", "wrap":
	default:
		return at(keyPos(h.Keys, "output", h.Pos), "stage %q: output %q: want body or wrap", stage, h.Output)
	}
	for k := range h.Headers {
		if k == "" || strings.ContainsAny(k, " :\r\n") {
			return at(keyPos(h.Keys, "headers", h.Pos), "stage %q: invalid header name %q", stage, k)
		}
	}
	return nil
}

// jsonBody reports whether the stage's body is sent as JSON: with no Content-Type
// header (application/json is added) or one whose media type is JSON
// (application/json, application/problem+json).
func (h *HTTPSpec) jsonBody() bool {
	for k, v := range h.Headers {
		if strings.EqualFold(k, "Content-Type") {
			mt, _, _ := strings.Cut(expandEnv(v), ";")
			mt = strings.ToLower(strings.TrimSpace(mt))
			return mt == "application/json" || strings.HasSuffix(mt, "+json")
		}
	}
	return true
}

// bodyTemplate returns the body template with every ${VAR} written in its text replaced
// by the environment variable, as in the url and the headers. Only the file's text is
// expanded, once, when the stage is built: never a ${VAR} in an item's data (which
// would let an item read the runner's environment), and never inside {{ }} actions. A
// JSON body gets the value escaped as the inside of a JSON string (quotes, backslashes,
// control characters), so that a secret holding a '"' cannot end the string and
// silently change the document: write "${VAR}" between quotes; {{env "VAR"}} writes a
// value unescaped, such as a JSON fragment.
func (h *HTTPSpec) bodyTemplate() (*template.Template, error) {
	t, err := template.New("body").Funcs(funcs).Option("missingkey=error").Parse(*h.Body)
	if err != nil {
		return nil, err
	}
	quote := h.jsonBody()
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
			expandText(tt.Tree.Root, quote)
		}
	}
	return t, nil
}

// expandText replaces ${VAR} in the text nodes under n.
func expandText(n parse.Node, quote bool) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			expandText(c, quote)
		}
	case *parse.TextNode:
		n.Text = envRef.ReplaceAllFunc(n.Text, func(m []byte) []byte {
			v := os.Getenv(string(m[2 : len(m)-1]))
			if !quote {
				return []byte(v)
			}
			return jsonStringContent(v)
		})
	case *parse.IfNode:
		expandText(n.List, quote)
		expandText(n.ElseList, quote)
	case *parse.RangeNode:
		expandText(n.List, quote)
		expandText(n.ElseList, quote)
	case *parse.WithNode:
		expandText(n.List, quote)
		expandText(n.ElseList, quote)
	}
}

// jsonStringContent returns v as the inside of a JSON string, without its quotes.
func jsonStringContent(v string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // a string always encodes
	out := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	return out[1 : len(out)-1]
}

// funcs are the functions of http templates.
var funcs = template.FuncMap{
	// json writes v as JSON: {"prompt": {{json .text}}}.
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	// env returns an environment variable.
	"env": os.Getenv,
}

// maxErrorBody bounds what is read of a failed response's body for the error message;
// the rest is not read and the connection is closed rather than reused.
const maxErrorBody = 64 << 10

// httpHandler returns the handler of an http stage. Its calls go through a
// retryhttp.Transport of the stage's own: keep-alive connections pooled (at least
// workers idle ones per host, so that every worker reuses one), bodies read to the end
// or closed. The engine owns the retries (inside it the transport makes one attempt per
// engine attempt) and the flow control: the stage's pace, gate and outage pause wait
// before the attempt starts, and its slow start ramps by time from 10 calls/s once the
// transport tells it the stage calls over the network. The transport paces nothing
// itself: its waits would run inside the attempt, under the stage's timeout, and kill
// items that were never sent; with rate_limit: off nothing paces the stage at all.
func httpHandler(st *StageSpec, workers int) (redrive.Handler, error) {
	h := st.HTTP
	var bodyT *template.Template
	if h.Body != nil {
		var err error
		if bodyT, err = h.bodyTemplate(); err != nil {
			return nil, at(keyPos(h.Keys, "body", h.Pos), "stage %q: body template: %v", st.Name, err)
		}
	}
	jsonBody := h.jsonBody()
	// The stage's timeout bounds each attempt through ctx.
	client := &http.Client{Transport: &retryhttp.Transport{
		MaxIdleConnsPerHost: max(workers, retryhttp.DefaultMaxIdleConnsPerHost),
		NoFlowControl:       true,
	}}
	return func(ctx context.Context, item *redrive.Item) ([]byte, error) {
		var data any
		if err := json.Unmarshal(item.Payload, &data); err != nil {
			return nil, retry.Final(fmt.Errorf("stage input is not JSON: %w", err))
		}
		var u bytes.Buffer
		if err := h.url.Execute(&u, data); err != nil {
			return nil, retry.Final(fmt.Errorf("url template: %w", err))
		}
		url := expandEnv(strings.TrimSpace(u.String()))
		var body io.Reader
		switch {
		case bodyT != nil:
			var b bytes.Buffer
			if err := bodyT.Execute(&b, data); err != nil {
				return nil, retry.Final(fmt.Errorf("body template: %w", err))
			}
			if jsonBody && !json.Valid(b.Bytes()) {
				// Sent as JSON, it would be refused or misread; the error gives the
				// offset only, as the body may hold a secret.
				return nil, retry.Final(fmt.Errorf("body template: the body is not valid JSON (%s), and it is sent as JSON", jsonSyntaxPlace(b.Bytes())))
			}
			body = &b
		case h.Method != http.MethodGet && h.Method != http.MethodHead:
			body = bytes.NewReader(item.Payload)
		}
		req, err := http.NewRequestWithContext(ctx, h.Method, url, body)
		if err != nil {
			return nil, retry.Final(fmt.Errorf("request: %w", err))
		}
		for k, v := range h.Headers {
			req.Header.Set(k, expandEnv(v))
		}
		setTraceHeaders(ctx, req.Header, item)
		if body != nil && req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, ctx.Err() // the runner is stopping
			}
			o := retryhttp.Classify(nil, err)
			return nil, classed(o, fmt.Errorf("%s %s: %w", h.Method, redactURL(url), err))
		}
		defer resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			o := retryhttp.Classify(resp, nil)
			return nil, classed(o, fmt.Errorf("HTTP %s: %s", resp.Status, snippet(bytes.TrimSpace(b))))
		}
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxOutput+1))
		if rerr != nil {
			if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, ctx.Err()
			}
			o := retryhttp.Classify(nil, rerr)
			return nil, classed(o, fmt.Errorf("reading response: %w", rerr))
		}
		if len(b) > maxOutput {
			return nil, retry.Final(fmt.Errorf("response larger than %d bytes", maxOutput))
		}
		b = bytes.TrimSpace(b)
		if h.Output == "wrap" {
			r := json.RawMessage(b)
			if !json.Valid(b) {
				r, _ = json.Marshal(string(b))
			}
			return json.Marshal(struct {
				Input    json.RawMessage `json:"input"`
				Status   int             `json:"status"`
				Response json.RawMessage `json:"response"`
			}{json.RawMessage(item.Payload), resp.StatusCode, r})
		}
		return b, nil
	}, nil
}

// jsonSyntaxPlace says where b stops being JSON, without quoting it.
func jsonSyntaxPlace(b []byte) string {
	var v any
	var se *json.SyntaxError
	if err := json.Unmarshal(b, &v); errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d of %d", se.Offset, len(b))
	}
	return fmt.Sprintf("%d bytes that end too early", len(b))
}

// classed wraps err with the class of o.
func classed(o retry.Outcome, err error) error {
	switch o.Class {
	case retry.ClassFinal:
		return retry.Final(err)
	case retry.ClassRateLimited:
		return retry.RateLimited(err, o.RetryAfter)
	}
	return retry.Retryable(err)
}

// redactURL drops the query and user info of a URL for error messages,
// which may hold secrets.
func redactURL(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.Index(u[i+3:], "@"); j >= 0 && !strings.Contains(u[i+3:i+3+j], "/") {
			u = u[:i+3] + u[i+3+j+1:]
		}
	}
	return u
}
