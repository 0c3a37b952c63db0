package redrive

import (
	"encoding/base64"
	"encoding/json"
	"unicode/utf8"
)

// Encodings of an item's bytes (its payload, input or output) in the JSON
// of the HTTP API and of notifications. Each such field has a sibling
// field "<name>_encoding" naming one of them, so that a reader never has
// to guess: the field's value is the JSON itself, or a base64 string.
const (
	// EncodingJSON: the bytes are one valid JSON value in UTF-8 and the
	// field holds that value (compacted: whitespace between tokens is not
	// kept).
	EncodingJSON = "json"
	// EncodingBase64: the bytes are not JSON (plain text, binary) and the
	// field holds them as a string in standard, padded base64.
	EncodingBase64 = "base64"
)

// EncodeBytes returns b as a JSON value and the encoding it used: b itself
// when b is one valid JSON value in UTF-8 (EncodingJSON), else b in base64
// as a JSON string (EncodingBase64). Decoding the value by its encoding
// gives back b, up to insignificant whitespace of JSON.
func EncodeBytes(b []byte) (json.RawMessage, string) {
	if utf8.Valid(b) && json.Valid(b) {
		return json.RawMessage(b), EncodingJSON
	}
	s, _ := json.Marshal(base64.StdEncoding.EncodeToString(b)) // a string always marshals
	return s, EncodingBase64
}
