package web

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// TestItemViewJSONIsEncoded checks that an item of a page, written by
// appendJSON without the JSON encoder's pass, is what the encoder writes
// for it: compact, with HTML characters escaped, in outputs with spaces,
// HTML characters and bytes that are not JSON.
func TestItemViewJSONIsEncoded(t *testing.T) {
	at := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	base := redrive.Item{ID: 7, RunID: 2, Pipeline: "p", Key: "k<1>", Stage: "s", State: redrive.StateSucceeded,
		Attempt: 1, Input: []byte(`{"in": 1}`), EnqueuedAt: at, OrderAt: at, NextAt: at, UpdatedAt: at}
	for _, out := range []string{`{"a": "b & c", "d": [1, 2]}`, "{\n \"x\": \"\u2028 <b>\"\n}", `"plain"`, "not json", ""} {
		for _, inc := range []includes{{output: true}, {output: true, payload: true, input: true}, {}} {
			it := base
			it.Payload = []byte(out)
			v := viewItem(it, inc)
			got, err := v.appendJSON(nil)
			if err != nil {
				t.Fatal(err)
			}
			var enc bytes.Buffer
			e := json.NewEncoder(&enc)
			e.SetEscapeHTML(true)
			if err := e.Encode(json.RawMessage(got)); err != nil {
				t.Fatalf("output %q: the page's item is not JSON: %v\n%s", out, err, got)
			}
			if want := bytes.TrimSuffix(enc.Bytes(), []byte("\n")); !bytes.Equal(got, want) {
				t.Errorf("output %q, %+v:\n got %s\nwant %s", out, inc, got, want)
			}
			var back map[string]json.RawMessage
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
			if _, ok := back["output"]; ok != inc.output {
				t.Errorf("output %q, %+v: output shown %v", out, inc, ok)
			}
		}
	}
}
