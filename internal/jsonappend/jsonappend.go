// Package jsonappend appends JSON values to a byte slice exactly as
// encoding/json's Marshal writes them (HTML characters escaped, raw JSON
// compacted), without reflection: for the hot encoders of items, which
// write thousands of them a page.
package jsonappend

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// String appends s as a JSON string, as json.Marshal writes it.
func String(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			// Escapes, HTML characters and UTF-8 (whose invalid bytes
			// json.Marshal replaces): as json.Marshal does.
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// Int appends n.
func Int(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }

// Time appends t as time.Time's MarshalJSON writes it (RFC 3339 with
// nanoseconds, quoted); like it, it fails for a year outside [0, 9999].
func Time(dst []byte, t time.Time) ([]byte, error) {
	dst = append(dst, '"')
	dst, err := t.AppendText(dst)
	if err != nil {
		return nil, err
	}
	return append(dst, '"'), nil
}

// Raw appends raw, which must be one valid JSON value, as json.Marshal
// writes a json.RawMessage: compacted, with '<', '>', '&', U+2028 and
// U+2029 escaped.
func Raw(dst, raw []byte) []byte {
	if plain(raw) {
		return append(dst, raw...)
	}
	var c bytes.Buffer
	c.Grow(len(raw))
	if err := json.Compact(&c, raw); err != nil {
		// Not valid JSON, against the contract: as it is.
		return append(dst, raw...)
	}
	var e bytes.Buffer
	e.Grow(c.Len())
	json.HTMLEscape(&e, c.Bytes())
	return append(dst, e.Bytes()...)
}

// plain reports whether the valid JSON value raw is already compact and
// has nothing to escape: no whitespace outside its strings, no '<', '>'
// or '&', and no byte 0xE2 (which begins U+2028 and U+2029, and other
// characters, to be safe).
func plain(raw []byte) bool {
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '<' || c == '>' || c == '&' || c == 0xE2:
			return false
		case in && c == '\\':
			i++ // the escaped character cannot end the string
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}
