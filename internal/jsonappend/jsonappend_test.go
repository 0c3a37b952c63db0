package jsonappend

import (
	"encoding/json"
	"testing"
	"time"
)

func TestStringMatchesMarshal(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "<b>&</b>", "tab\there", "\x00\x1f", "é ü 日本",
		"\u2028\u2029", "bad \xff utf-8", "\x7f"} {
		want, _ := json.Marshal(s)
		if got := String(nil, s); string(got) != string(want) {
			t.Errorf("String(%q) = %s, want %s", s, got, want)
		}
	}
}

func TestTimeMatchesMarshal(t *testing.T) {
	for _, tm := range []time.Time{{}, time.Date(2026, 11, 26, 3, 4, 5, 123456789, time.UTC),
		time.Date(2026, 11, 26, 3, 4, 5, 0, time.FixedZone("x", 3600)), time.Unix(0, 1).UTC()} {
		want, _ := json.Marshal(tm)
		got, err := Time(nil, tm)
		if err != nil || string(got) != string(want) {
			t.Errorf("Time(%v) = %s, %v; want %s", tm, got, err, want)
		}
	}
	if _, err := Time(nil, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)); err == nil {
		t.Error("Time(year 10000) succeeded; json.Marshal fails")
	}
}

func TestRawMatchesMarshal(t *testing.T) {
	for _, raw := range []string{`null`, `{"a":1}`, `{ "a" : [1, 2] }`, "{\n\t\"s\": \"in a string: spaces \\\" <b>\"\n}",
		`"a&b"`, `"\u2028"`, "\"\u2028\u2029 é\"", `["x\\", " y "]`, `"\\"`, `  3  `, `{"k":"v"}`} {
		want, err := json.Marshal(json.RawMessage(raw))
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if got := Raw(nil, []byte(raw)); string(got) != string(want) {
			t.Errorf("Raw(%q) = %s, want %s", raw, got, want)
		}
	}
}

func FuzzRawMatchesMarshal(f *testing.F) {
	for _, s := range []string{`{"a": "b c"}`, `[1, "<"]`, `"\\\""`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if !json.Valid([]byte(raw)) {
			return
		}
		want, err := json.Marshal(json.RawMessage(raw))
		if err != nil {
			t.Skip()
		}
		if got := Raw(nil, []byte(raw)); string(got) != string(want) {
			t.Errorf("Raw(%q) = %s, want %s", raw, got, want)
		}
	})
}

func FuzzStringMatchesMarshal(f *testing.F) {
	f.Add("a<b")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := String(nil, s); string(got) != string(want) {
			t.Errorf("String(%q) = %s, want %s", s, got, want)
		}
	})
}
