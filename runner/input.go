package runner

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// Line is one item read from a JSONL input file.
type Line struct {
	// Number is the 1-based line number in the file.
	Number int
	// ID identifies the item within its run: the line's "id" field (a string,
	// or a number's literal text), else the first 16 bytes of the SHA-256 of
	// the line in hex; for an invalid line, "line:N:<hash>".
	ID string
	// Payload is the line, surrounding white space removed.
	Payload []byte
	// Invalid, when not empty, says why the line cannot be processed.
	Invalid string
	// OrderAt is the line's "order_at" field, an RFC 3339 time: the item's
	// order time among due items (see redrive.NewItem.OrderAt). Default:
	// zero, the enqueue time.
	OrderAt time.Time
}

// ReadInput reads a JSONL file: one JSON value per line, blank lines
// skipped. Lines that are not JSON, or repeat an earlier line's id, are
// returned with Invalid set rather than failing the read, so they are
// accounted for as dead items.
func ReadInput(path string) ([]Line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("runner: input: %w", err)
	}
	defer f.Close()
	lines, err := readLines(f)
	if err != nil {
		return nil, fmt.Errorf("runner: input %s: %w", path, err)
	}
	return lines, nil
}

func readLines(r io.Reader) ([]Line, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var out []Line
	firstLine := map[string]int{}
	for n := 1; ; n++ {
		raw, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return out, err
		}
		b := bytes.TrimSpace(raw)
		if n == 1 {
			b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
		}
		if len(b) > 0 {
			out = append(out, parseLine(n, b, firstLine))
		}
		if err != nil {
			return out, nil
		}
	}
}

func hashID(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

func parseLine(n int, b []byte, firstLine map[string]int) Line {
	l := Line{Number: n, Payload: append([]byte(nil), b...)}
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	err := dec.Decode(&v)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value on the line")
	} else if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("invalid characters after the JSON value")
		}
	}
	if err != nil {
		l.ID = "line:" + strconv.Itoa(n) + ":" + hashID(b)
		l.Invalid = fmt.Sprintf("invalid input: line %d: %v", n, err)
		return l
	}
	l.ID = hashID(b)
	if obj, ok := v.(map[string]any); ok {
		switch id := obj["id"].(type) {
		case string:
			if id != "" {
				l.ID = id
			}
		case json.Number:
			l.ID = id.String()
		}
	}
	if first, dup := firstLine[l.ID]; dup {
		l.Invalid = fmt.Sprintf("invalid input: line %d: duplicate id %q (first on line %d)", n, l.ID, first)
		l.ID = "line:" + strconv.Itoa(n) + ":" + hashID(b)
		return l
	}
	firstLine[l.ID] = n
	if obj, ok := v.(map[string]any); ok {
		if oa, ok := obj["order_at"]; ok {
			s, _ := oa.(string)
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				l.Invalid = fmt.Sprintf("invalid input: line %d: field order_at: want an RFC 3339 time such as \"2026-11-23T09:00:00Z\", got %s", n, jsonText(oa))
			}
			l.OrderAt = t
		}
	}
	return l
}

// jsonText is v as JSON, for messages.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
