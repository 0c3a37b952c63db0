package runner_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/redrive/redrive/examples/flakyapi/flaky"
)

// TestHTTPBodyExpandsEnv: ${VAR} in an http stage's body is the environment variable, as
// in its url and headers; in a JSON body its quotes, backslashes and newlines are
// escaped, so the body stays the JSON the file wrote. A ${VAR} that comes from an item's
// data is not expanded: an item cannot read the runner's environment. The body used to
// go out with "${VAR}" as written.
func TestHTTPBodyExpandsEnv(t *testing.T) {
	const secret = "to\"k\\en\nx"
	t.Setenv("RUNNER_BODY_SECRET", secret)
	srv := startFlaky(t, flaky.Options{})
	yaml := fmt.Sprintf(`name: body
stages:
  - name: complete
    rate_limit: off
    http:
      url: "%s/v1/complete"
      body: '{"prompt": "${RUNNER_BODY_SECRET} {{.word}}", "echo": {{json .word}}}'
`, srv.URL)
	sum, _ := runPipeline(t, yaml, []string{`{"id":"a","word":"alpha"}`, `{"id":"b","word":"${RUNNER_BODY_SECRET}"}`})
	if sum.Counts.Succeeded != 2 {
		t.Fatalf("counts %+v; bodies %q", sum.Counts, srv.bodies)
	}
	got := srv.requests()
	if got[secret+" alpha"] != 1 {
		t.Errorf("prompts %v, want %q: the variable's value, escaped in the JSON body", got, secret+" alpha")
	}
	if got[secret+" ${RUNNER_BODY_SECRET}"] != 1 {
		t.Errorf("prompts %v: the item's own ${RUNNER_BODY_SECRET} must stay as it is", got)
	}
	for _, b := range srv.bodies {
		var v struct{ Echo string }
		if err := json.Unmarshal([]byte(b), &v); err != nil {
			t.Errorf("body %q is not JSON: %v", b, err)
		}
		if v.Echo != "alpha" && v.Echo != "${RUNNER_BODY_SECRET}" {
			t.Errorf("body %q: echo %q", b, v.Echo)
		}
	}
}

// TestHTTPBodyNotJSONIsFinal: a body template that does not make JSON while the body is
// sent as JSON fails the item at once, with an error that says where the JSON breaks and
// does not quote the body (it may hold a secret); no request is sent. With a Content-Type
// of its own the body is sent as written, ${VAR} unescaped.
func TestHTTPBodyNotJSONIsFinal(t *testing.T) {
	t.Setenv("RUNNER_BODY_SECRET", `s"3`)
	srv := startFlaky(t, flaky.Options{})
	yaml := fmt.Sprintf(`name: body
stages:
  - name: complete
    rate_limit: off
    retry: {max_attempts: 3, base: 10ms}
    http:
      url: "%s/v1/complete"
      body: '{"prompt": {{.word}}, "key": "${RUNNER_BODY_SECRET}"}'
`, srv.URL)
	sum, _ := runPipeline(t, yaml, []string{`{"id":"a","word":"alpha"}`})
	if sum.Counts.Dead != 1 || len(srv.bodies) != 0 {
		t.Fatalf("counts %+v, %d requests; want the item dead, nothing sent", sum.Counts, len(srv.bodies))
	}
	dead := sum.DeadByClass["final"]
	if dead != 1 {
		t.Errorf("dead by class %v, want 1 final", sum.DeadByClass)
	}
	var b strings.Builder
	if err := sum.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "body template: the body is not valid JSON (syntax error at byte") || strings.Contains(b.String(), "alpha") || strings.Contains(b.String(), `s\"3`) {
		t.Errorf("summary:\n%s\nwant the JSON error with its byte offset, without the body", b.String())
	}

	srv = startFlaky(t, flaky.Options{})
	yaml = fmt.Sprintf(`name: text
stages:
  - name: complete
    rate_limit: off
    http:
      url: "%s/v1/complete"
      headers: {Content-Type: text/plain}
      body: 'key=${RUNNER_BODY_SECRET}'
`, srv.URL)
	runPipeline(t, yaml, []string{`{"id":"a"}`})
	if len(srv.bodies) != 1 || srv.bodies[0] != `key=s"3` {
		t.Errorf("bodies %q, want the value as written: key=s\"3", srv.bodies)
	}
}
