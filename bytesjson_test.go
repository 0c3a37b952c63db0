package redrive_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/redrive/redrive"
)

// TestItemJSON checks the encoding of an item's bytes: JSON inline, other
// bytes in base64, each named by its encoding; that decoding gives the
// bytes back; and that JSON written before encodings were named (base64
// without an encoding) still decodes.
func TestItemJSON(t *testing.T) {
	cases := []struct {
		name    string
		b       []byte
		value   string
		encoded string
	}{
		{"object", []byte(`{"a": [1, 2]}`), `{"a":[1,2]}`, "json"},
		{"string", []byte(`"hello"`), `"hello"`, "json"},
		{"number", []byte(`42`), `42`, "json"},
		{"text", []byte("hello\n"), `"aGVsbG8K"`, "base64"},
		{"two values", []byte(`1 2`), `"MSAy"`, "base64"},
		{"invalid UTF-8 in a JSON string", []byte("\"\xff\""), `"Iv8i"`, "base64"},
		{"empty", []byte{}, `""`, "base64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			it := redrive.Item{ID: 7, State: redrive.StateSucceeded, Payload: c.b, Input: []byte(`{"in":1}`)}
			out, err := json.Marshal(it)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatal(err)
			}
			var compact bytes.Buffer
			_ = json.Compact(&compact, m["payload"])
			if compact.String() != c.value || string(m["payload_encoding"]) != `"`+c.encoded+`"` {
				t.Errorf("payload %s (%s), want %s (%s)", m["payload"], m["payload_encoding"], c.value, c.encoded)
			}
			if string(m["input"]) != `{"in":1}` || string(m["input_encoding"]) != `"json"` {
				t.Errorf("input %s (%s)", m["input"], m["input_encoding"])
			}
			var back redrive.Item
			if err := json.Unmarshal(out, &back); err != nil {
				t.Fatal(err)
			}
			want := c.b
			if c.encoded == "json" {
				want = compact.Bytes()
			}
			if !bytes.Equal(back.Payload, want) || string(back.Input) != `{"in":1}` || back.ID != 7 {
				t.Errorf("decoded payload %q input %q, want %q", back.Payload, back.Input, want)
			}
		})
	}

	// Older versions wrote base64 without an encoding.
	var old redrive.Item
	if err := json.Unmarshal([]byte(`{"id":3,"payload":"eyJvayI6dHJ1ZX0=","input":"aGk="}`), &old); err != nil {
		t.Fatal(err)
	}
	if string(old.Payload) != `{"ok":true}` || string(old.Input) != "hi" {
		t.Errorf("legacy item decoded to payload %q input %q", old.Payload, old.Input)
	}
	// Nil bytes are left out.
	out, _ := json.Marshal(redrive.Item{ID: 1})
	if bytes.Contains(out, []byte("payload")) || bytes.Contains(out, []byte("input")) {
		t.Errorf("item without bytes: %s", out)
	}
	for _, bad := range []string{`{"payload":"x","payload_encoding":"hex"}`, `{"payload":{"a":1},"payload_encoding":"base64"}`, `{"payload":"!!","payload_encoding":"base64"}`} {
		if err := json.Unmarshal([]byte(bad), new(redrive.Item)); err == nil {
			t.Errorf("%s decoded without an error", bad)
		}
	}
}
