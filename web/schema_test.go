package web_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// checkSchema validates v (decoded JSON) against the subset of JSON Schema
// that docs/openapi.yaml uses: $ref into the document, type, properties,
// required, additionalProperties: false, items, enum, minimum, maximum,
// maxLength and format date-time. It returns every violation, each with
// its JSON path.
func checkSchema(doc map[string]any, schema map[string]any, v any, path string) []string {
	if ref, ok := schema["$ref"].(string); ok {
		target, err := resolve(doc, ref)
		if err != nil {
			return []string{path + ": " + err.Error()}
		}
		return checkSchema(doc, target, v, path)
	}
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, args...)) }
	if t, ok := schema["type"].(string); ok && !hasType(v, t) {
		fail("want %s, got %T (%v)", t, v, v)
		return errs
	}
	if enum, ok := schema["enum"].([]any); ok && !slices.Contains(enum, v) {
		fail("%v is not one of %v", v, enum)
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := schema["properties"].(map[string]any)
		for _, r := range asList(schema["required"]) {
			if _, ok := x[r.(string)]; !ok {
				fail("required property %q missing", r)
			}
		}
		for k, val := range x {
			ps, ok := props[k].(map[string]any)
			if !ok {
				if ap, set := schema["additionalProperties"].(bool); set && !ap {
					fail("property %q is not in the schema", k)
				}
				continue
			}
			errs = append(errs, checkSchema(doc, ps, val, path+"."+k)...)
		}
	case []any:
		if is, ok := schema["items"].(map[string]any); ok {
			for i, e := range x {
				errs = append(errs, checkSchema(doc, is, e, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	case string:
		if schema["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, x); err != nil {
				fail("%q is not an RFC 3339 date-time", x)
			}
		}
		if m, ok := schema["maxLength"].(int); ok && len(x) > m {
			fail("longer than %d", m)
		}
	case float64:
		if m, ok := number(schema["minimum"]); ok && x < m {
			fail("%v below minimum %v", x, m)
		}
		if m, ok := number(schema["maximum"]); ok && x > m {
			fail("%v above maximum %v", x, m)
		}
	}
	return errs
}

func asList(v any) []any { l, _ := v.([]any); return l }

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func hasType(v any, t string) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == float64(int64(f))
	case "null":
		return v == nil
	}
	return false
}

// resolve follows a local reference such as #/components/schemas/Run.
func resolve(doc map[string]any, ref string) (map[string]any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("reference %q is not local", ref)
	}
	var cur any = doc
	for _, part := range strings.Split(ref[2:], "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("reference %q: %q is not an object", ref, part)
		}
		if cur, ok = m[part]; !ok {
			return nil, fmt.Errorf("reference %q: no %q", ref, part)
		}
	}
	m, ok := cur.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("reference %q is not an object", ref)
	}
	return m, nil
}

// decodeJSON decodes b with numbers as float64, as checkSchema expects.
func decodeJSON(b []byte) (any, error) {
	var v any
	err := json.Unmarshal(b, &v)
	return v, err
}
