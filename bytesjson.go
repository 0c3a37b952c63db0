package redrive

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
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

// DecodeBytes is the inverse of EncodeBytes: it returns the bytes that
// value, encoded as encoding says, stands for. An empty encoding is read
// as EncodingBase64, which is how items were written before encodings were
// named, so that JSON from older versions still reads. A missing or null
// value is nil.
func DecodeBytes(value json.RawMessage, encoding string) ([]byte, error) {
	if len(value) == 0 || string(value) == "null" {
		return nil, nil
	}
	switch encoding {
	case EncodingJSON:
		return append([]byte(nil), value...), nil
	case EncodingBase64, "":
		var s string
		if err := json.Unmarshal(value, &s); err != nil {
			return nil, fmt.Errorf("redrive: a base64 value must be a JSON string: %w", err)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("redrive: invalid base64: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("redrive: unknown encoding %q (want json or base64)", encoding)
}

// itemBytesJSON is Item's JSON shape: Item's fields, with its payload and
// input as EncodeBytes shows them and their encodings beside them.
type itemBytesJSON struct {
	itemFields
	Payload         json.RawMessage `json:"payload,omitempty"`
	PayloadEncoding string          `json:"payload_encoding,omitempty"`
	Input           json.RawMessage `json:"input,omitempty"`
	InputEncoding   string          `json:"input_encoding,omitempty"`
}

// itemFields is Item without its methods, so that marshaling it does not
// recurse; its Payload and Input are shadowed by itemBytesJSON's.
type itemFields Item

// MarshalJSON shows the item with its payload and input in the encoding of
// EncodeBytes: the JSON value itself when the bytes are JSON, else a base64
// string, with "payload_encoding" and "input_encoding" naming which. Nil
// bytes are left out.
func (it Item) MarshalJSON() ([]byte, error) {
	return appendItemJSON(make([]byte, 0, 512+len(it.Payload)+len(it.Input)), it)
}

// UnmarshalJSON reads what MarshalJSON writes, and the JSON of older
// versions, whose payload and input were base64 strings without an
// encoding beside them.
func (it *Item) UnmarshalJSON(b []byte) error {
	var v itemBytesJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	out := Item(v.itemFields)
	var err error
	if out.Payload, err = DecodeBytes(v.Payload, v.PayloadEncoding); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	if out.Input, err = DecodeBytes(v.Input, v.InputEncoding); err != nil {
		return fmt.Errorf("input: %w", err)
	}
	*it = out
	return nil
}
