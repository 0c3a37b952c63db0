package redrive

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestFingerprint(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"malformed model output", "malformed model output"},
		{"item 17: malformed model output at byte 3912", "item <n>: malformed model output at byte <n>"},
		{"item 90: malformed model output at byte 12", "item <n>: malformed model output at byte <n>"},
		{`unknown field "colour" in record 4`, "unknown field <quoted> in record <n>"},
		{"unknown field 'size' in record 4", "unknown field <quoted> in record <n>"},
		{"can't parse: don't know", "can't parse: don't know"},
		{"Get https://api.example.com/v1/items/42?x=1: timeout", "Get <url>: timeout"},
		{"dial tcp 10.0.0.7:5432: connection refused", "dial tcp <host:port>: connection refused"},
		{"dial tcp db.internal:5432: i/o timeout", "dial tcp <host:port>: i/o timeout"},
		{"dial tcp localhost:8080: refused", "dial tcp <host:port>: refused"},
		{"dial tcp [::1]:8080: refused", "dial tcp <host:port>: refused"},
		{"order 3f2504e0-4f89-11d3-9a0c-0305e82c3301 missing", "order <uuid> missing"},
		{"object 9f86d081884c7d65 not found", "object <hex> not found"},
		{"pointer 0xc000123abc", "pointer <hex>"},
		{"a facade of 123456 bytes", "a facade of <n> bytes"},
		{"HTTP 503 after 2.5s", "HTTP 503 after <n>s"},
		{"status 429: retry in 30s", "status 429: retry in <n>s"},
		{"status code 500 for item 7", "status code 500 for item <n>"},
		{"http/1.1 502", "http/1.1 502"},
		{"  spaced \t out\n message ", "spaced out message"},
		{"", ""},
	} {
		if got := Fingerprint(tc.in); got != tc.want {
			t.Errorf("Fingerprint(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFingerprintBounded(t *testing.T) {
	long := strings.Repeat("é", 300)
	got := Fingerprint(long)
	if len(got) > maxFingerprint || !utf8.ValidString(got) || len(got) < maxFingerprint-4 {
		t.Errorf("Fingerprint of %d bytes = %d bytes, valid %v", len(long), len(got), utf8.ValidString(got))
	}
}

func TestGroupErrors(t *testing.T) {
	dead := []ErrorCount{
		{Pipeline: "p", Stage: "llm", Class: "final", Error: "item 1: malformed model output", Count: 1},
		{Pipeline: "p", Stage: "llm", Class: "final", Error: "item 2: malformed model output", Count: 3},
		{Pipeline: "p", Stage: "fetch", Class: "retryable", Error: "HTTP 503", Count: 2},
	}
	failed := []ErrorCount{
		{Pipeline: "p", Stage: "fetch", Class: "retryable", Error: "HTTP 503", Count: 9},
		{Pipeline: "p", Stage: "fetch", Class: "retryable", Error: "HTTP 429", Count: 20},
		{Pipeline: "p", Stage: "llm", Class: "final", Error: "item 3: malformed model output", Count: 1},
	}
	g := GroupErrors(dead, failed)
	if len(g) != 3 {
		t.Fatalf("GroupErrors = %+v, want 3 groups", g)
	}
	first := g[0]
	if first.Stage != "llm" || first.Fingerprint != "item <n>: malformed model output" || first.Dead != 4 || first.Failures != 1 || first.Messages != 3 {
		t.Errorf("first group = %+v", first)
	}
	if len(first.Examples) != 3 || first.Examples[0] != "item 2: malformed model output" {
		t.Errorf("examples = %q, want the most frequent first", first.Examples)
	}
	if g[1].Fingerprint != "HTTP 503" || g[1].Dead != 2 || g[1].Failures != 9 {
		t.Errorf("second group = %+v", g[1])
	}
	if g[2].Fingerprint != "HTTP 429" || g[2].Dead != 0 || g[2].Failures != 20 {
		t.Errorf("third group (ranked by deaths, then failures) = %+v", g[2])
	}
}
