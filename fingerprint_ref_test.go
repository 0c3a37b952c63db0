package redrive

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// referenceRules are the regular expressions that Fingerprint was first
// written with. Fingerprint scans by hand for speed, but fingerprints are
// stored (failure counts, the console's groups, filters) and compared across
// versions, so it must give what these give, byte for byte.
var referenceRules = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>]*[^\s"'<>.,:;)\]]`), "<url>"},
	{regexp.MustCompile(`"(?:[^"\\\n]|\\.)*"|` + "`[^`\n]*`"), "<quoted>"},
	{regexp.MustCompile(`(^|[\s(\[{:=,])'[^'\n]*'`), "$1<quoted>"},
	{regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`), "<uuid>"},
	{regexp.MustCompile(`\[[0-9a-fA-F:.]*\]:\d+|\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b|\b(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+):\d{1,5}\b`), "<host:port>"},
	{regexp.MustCompile(`\b0[xX][0-9a-fA-F]+\b`), "<hex>"},
}

var (
	referenceHexWord    = regexp.MustCompile(`\b[0-9a-fA-F]{6,}\b`)
	referenceStatusCode = regexp.MustCompile(`(?i)\b(?:status|code|http(?:/\d(?:\.\d)?)?)(?: code)?[ :=]+[1-5]\d\d\b`)
	referenceNumber     = regexp.MustCompile(`\d+(?:\.\d+)?`)
	referenceSpaces     = regexp.MustCompile(`\s+`)
)

// referenceFingerprint is Fingerprint as the regular expressions above
// define it.
func referenceFingerprint(msg string) string {
	s := msg
	for _, r := range referenceRules {
		s = r.re.ReplaceAllString(s, r.with)
	}
	s = referenceHexWord.ReplaceAllStringFunc(s, func(w string) string {
		if strings.Trim(w, "0123456789") == "" || strings.Trim(w, "0123456789") == w {
			return w
		}
		return "<hex>"
	})
	var b strings.Builder
	last := 0
	for _, m := range referenceStatusCode.FindAllStringIndex(s, -1) {
		b.WriteString(referenceNumber.ReplaceAllString(s[last:m[0]], "<n>"))
		b.WriteString(s[m[0]:m[1]])
		last = m[1]
	}
	b.WriteString(referenceNumber.ReplaceAllString(s[last:], "<n>"))
	s = strings.TrimSpace(referenceSpaces.ReplaceAllString(b.String(), " "))
	if len(s) > maxFingerprint {
		s = strings.ToValidUTF8(s[:maxFingerprint], "")
	}
	return s
}

// fingerprintFragments are pieces of error messages chosen to sit on the
// edges of the rules: keywords in every case (and with ſ, which (?i) folds
// to s), numbers of every length, hex and UUIDs cut short or run on,
// addresses with and without ports, URLs with trailing punctuation, quotes
// escaped, unclosed and broken by lines, every kind of white space, and
// bytes that are not ASCII or not UTF-8.
var fingerprintFragments = []string{
	"status", "STATUS", "Status", "ſtatus", "ſtatuſ", "code", "CODE", "Code", "http", "HTTP", "http/1.1",
	"http/2", "HTTP/1.0", "http/1.", "http/", " code", " CODE", "status code", "code:",
	"503", "429", "200", "600", "5000", "50", "1.5", "3.14159", "007", "0", "12345", "123456", "99999999",
	"0x1f", "0X", "0xg", "0xdeadBEEF", "0x", "deadbeef", "facade", "abc123", "123abc", "a1b2c3", "abc123def",
	"9f86d081884c7d65", "DEADBEEF42", "3f2504e0-4f89-11d3-9a0c-0305e82c3301", "3F2504E0-4F89-11D3-9A0C-0305E82C3301",
	"3f2504e0-4f89-11d3-9a0c-0305e82c330", "3f2504e0-4f89-11d3-9a0c-0305e82c3301a",
	"10.0.0.7", "10.0.0.7:5432", "1.2.3.4.5", "1234.1.2.3", "256.1.1.1", "1.2.3", "1.2.3.4:", "1.2.3.4:80x",
	"[::1]:8080", "[fe80::1]:80", "[]:1", "[::1]", "[::1]:", "localhost:8080", "localhost", "localhost:123456",
	"localhost.example.com:443", "db.internal:5432", "a-b.c-d:123456", "x.y:0", "host:80", "a..b.c:80",
	".com:80", "a.b.:80", "-a.b:1", "a.b:1_",
	"http://a.b/c", "https://api.example.com/v1/items/42?x=1", "s3://bucket/key.", "1http://x", "://", "a://",
	"a://.", "file:///tmp/x)", "git+ssh://h:22/r.git", "x://y://z",
	`"`, `\"`, `\\`, `\`, "`", "'", "can't", "don't", "'quoted'", `"json \"esc\" str"`, "\"unterminated",
	"`tick`", "\\\n",
	" ", "  ", "\t", "\n", "\r", "\f", "\v", "\u00a0", "\u0085", ":", "=", ",", "(", ")", "[", "]", "{", "}",
	".", ";", "-", "_", "/", "<", ">", "+", "?",
	"é", "ñ", "日本", "\xff", "\xc5", "\xbf", "\u212a", "x", "item", "byte", "at", "error", "timeout",
	"connection refused", "dial tcp",
}

// fingerprintSeparators join fragments.
var fingerprintSeparators = []string{"", "", " ", ": ", "=", ",", ".", "\n", "/", "-", ":", "'", `"`}

// fingerprintBytes are the characters of random short messages, dense in
// what the rules look for.
const fingerprintBytes = "0123456789abcdefxX.:-[]/\"'`\\ \n\t\vsStTaAuUcCoOdDeEhHpPlLkKn=,(){}<>_;ſé\xff"

// generatedMessages returns n messages made from a seeded generator: half
// of fragments and separators, half of random characters.
func generatedMessages(seed uint64, n int) []string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]string, 0, n)
	var b strings.Builder
	for i := range n {
		b.Reset()
		if i%2 == 0 {
			for range 1 + r.IntN(12) {
				b.WriteString(fingerprintFragments[r.IntN(len(fingerprintFragments))])
				b.WriteString(fingerprintSeparators[r.IntN(len(fingerprintSeparators))])
			}
		} else {
			for range r.IntN(60) {
				b.WriteByte(fingerprintBytes[r.IntN(len(fingerprintBytes))])
			}
		}
		out = append(out, b.String())
	}
	return out
}

func TestFingerprintMatchesReference(t *testing.T) {
	msgs := generatedMessages(2026, 40000)
	// Long messages, where a scan that went back over its input would
	// show, and where the cut to 200 bytes falls after replacements.
	msgs = append(msgs,
		`"`+strings.Repeat(`a\"`, 5000),
		strings.Repeat("a.", 5000)+"b",
		strings.Repeat("a-b.", 3000)+"c:8080",
		strings.Repeat("'x ", 3000),
		strings.Repeat("https://example.com/path?q=1 ", 400),
		strings.Repeat("status 503 item 42 ", 400),
		strings.Repeat("é", 300)+" 12",
	)
	bad := 0
	for _, m := range msgs {
		if got, want := Fingerprint(m), referenceFingerprint(m); got != want {
			if bad++; bad <= 10 {
				t.Errorf("Fingerprint(%q) = %q, the rules give %q", m, got, want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d messages differ", bad, len(msgs))
	}
}

func FuzzFingerprint(f *testing.F) {
	for _, m := range fingerprintFragments {
		f.Add(m)
	}
	for _, m := range generatedMessages(1, 200) {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, m string) {
		if got, want := Fingerprint(m), referenceFingerprint(m); got != want {
			t.Errorf("Fingerprint(%q) = %q, the rules give %q", m, got, want)
		}
	})
}

// realMessages are errors as handlers return them.
var realMessages = []string{
	"schema mismatch: field total missing",
	`Get "http://127.0.0.1:8080/charge": dial tcp 127.0.0.1:8080: connect: connection refused`,
	"item 17: malformed model output at byte 3912",
	"status 503: upstream unavailable",
	"context deadline exceeded",
	`pq: duplicate key value violates unique constraint "orders_pkey"`,
}

// BenchmarkFingerprint compares Fingerprint with the regular expressions
// it replaces, on messages as handlers return them.
func BenchmarkFingerprint(b *testing.B) {
	for _, impl := range []struct {
		name string
		fn   func(string) string
	}{{"scan", Fingerprint}, {"rules", referenceFingerprint}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, m := range realMessages {
					impl.fn(m)
				}
			}
		})
	}
}
