package runner

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// PosError is an error at a position of a pipeline file.
type PosError struct {
	// File is the file's path as given to LoadFile.
	File string
	// Line and Column are 1-based; Column is 0 when yaml.v3 does not report
	// it (syntax errors).
	Line, Column int
	// Msg says what is wrong.
	Msg string
	// Err is the underlying error, if any.
	Err error
}

// Error returns "file:line:column: msg".
func (e *PosError) Error() string {
	pos := fmt.Sprintf("%s:%d", e.File, e.Line)
	if e.Column > 0 {
		pos += fmt.Sprintf(":%d", e.Column)
	}
	return pos + ": " + e.Msg
}

// Unwrap returns the underlying error.
func (e *PosError) Unwrap() error { return e.Err }

// ErrInvalidSpec is wrapped by every error of LoadFile and Parse about the
// content of a pipeline file (as opposed to failing to read it).
var ErrInvalidSpec = errors.New("runner: invalid pipeline file")

type posError struct {
	line, col int
	msg       string
	err       error
}

func (e *posError) Error() string { return e.msg }
func (e *posError) Unwrap() error { return e.err }

func errAt(n *yaml.Node, format string, a ...any) error {
	return &posError{line: n.Line, col: n.Column, msg: fmt.Sprintf(format, a...)}
}

// Duration is a time.Duration written in YAML as a Go duration string
// ("250ms", "30s", "5m", "1h30m"); a bare number is rejected so that a
// missing unit is never guessed.
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errAt(n, "want a duration like \"30s\"")
	}
	v, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		return errAt(n, "invalid duration %q: want a number with a unit, like \"500ms\", \"30s\" or \"5m\"", n.Value)
	}
	if v < 0 {
		return errAt(n, "duration %q is negative", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// decodeStrict decodes node into out (a pointer), like yaml.v3 with
// KnownFields(true), but reporting the line and column of every problem:
// unknown and duplicate keys, wrong kinds and scalars that do not convert.
func decodeStrict(n *yaml.Node, out any) error {
	return decodeValue(n, reflect.ValueOf(out).Elem())
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

func decodeValue(n *yaml.Node, v reflect.Value) error {
	if n.Kind == yaml.AliasNode {
		return decodeValue(n.Alias, v)
	}
	if reflect.PointerTo(v.Type()).Implements(unmarshalerType) {
		if err := n.Decode(v.Addr().Interface()); err != nil {
			return wrapDecode(n, err)
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if n.Tag == "!!null" {
			v.SetZero()
			return nil
		}
		p := reflect.New(v.Type().Elem())
		if err := decodeValue(n, p.Elem()); err != nil {
			return err
		}
		v.Set(p)
		return nil
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			if n.Tag == "!!null" {
				return nil
			}
			return errAt(n, "want a mapping of keys to values, got %s", describe(n))
		}
		fields := map[string]int{}
		var names []string
		t := v.Type()
		for i := range t.NumField() {
			tag := t.Field(i).Tag.Get("yaml")
			name, _, _ := strings.Cut(tag, ",")
			if name == "" || name == "-" {
				continue
			}
			fields[name] = i
			names = append(names, name)
		}
		seen := map[string]bool{}
		keys := map[string]Pos{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Value == "<<" {
				return errAt(k, "merge keys are not supported")
			}
			idx, ok := fields[k.Value]
			if !ok {
				return errAt(k, "unknown key %q (want one of: %s)", k.Value, strings.Join(names, ", "))
			}
			if seen[k.Value] {
				return errAt(k, "key %q appears twice", k.Value)
			}
			seen[k.Value] = true
			keys[k.Value] = Pos{Line: val.Line, Column: val.Column}
			if err := decodeValue(val, v.Field(idx)); err != nil {
				return err
			}
		}
		if pf := v.FieldByName("Pos"); pf.IsValid() && pf.Type() == reflect.TypeFor[Pos]() {
			pf.Set(reflect.ValueOf(Pos{Line: n.Line, Column: n.Column}))
		}
		if kf := v.FieldByName("Keys"); kf.IsValid() && kf.Type() == reflect.TypeFor[map[string]Pos]() {
			kf.Set(reflect.ValueOf(keys))
		}
		return nil
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			break
		}
		if n.Tag == "!!null" {
			v.SetZero()
			return nil
		}
		if n.Kind != yaml.SequenceNode {
			return errAt(n, "want a list, got %s", describe(n))
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			if err := decodeValue(c, s.Index(i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Map:
		if n.Tag == "!!null" {
			v.SetZero()
			return nil
		}
		if n.Kind != yaml.MappingNode {
			return errAt(n, "want a mapping, got %s", describe(n))
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			kv := reflect.New(v.Type().Key()).Elem()
			if err := decodeValue(k, kv); err != nil {
				return err
			}
			if m.MapIndex(kv).IsValid() {
				return errAt(k, "key %q appears twice", k.Value)
			}
			ev := reflect.New(v.Type().Elem()).Elem()
			if err := decodeValue(val, ev); err != nil {
				return err
			}
			m.SetMapIndex(kv, ev)
		}
		v.Set(m)
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return errAt(n, "want a single value, got %s", describe(n))
	}
	if v.Kind() == reflect.String && n.Tag != "!!str" && n.Tag != "!!null" && n.Style == 0 {
		// Accept unquoted numbers and booleans as strings (args: [1, true]).
		v.SetString(n.Value)
		return nil
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		return wrapDecode(n, err)
	}
	return nil
}

func wrapDecode(n *yaml.Node, err error) error {
	var pe *posError
	if errors.As(err, &pe) {
		return err
	}
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg := te.Errors[0]
		if _, rest, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "line ") {
			msg = rest
		}
		return &posError{line: n.Line, col: n.Column, msg: msg, err: err}
	}
	return &posError{line: n.Line, col: n.Column, msg: err.Error(), err: err}
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}
