package redrive

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// marshalItemJSON is Item's JSON by reflection: what appendItemJSON must
// write.
func marshalItemJSON(it Item) ([]byte, error) {
	v := itemBytesJSON{itemFields: itemFields(it)}
	if it.Payload != nil {
		v.Payload, v.PayloadEncoding = EncodeBytes(it.Payload)
	}
	if it.Input != nil {
		v.Input, v.InputEncoding = EncodeBytes(it.Input)
	}
	return json.Marshal(v)
}

// fullItem returns an item with every field set (by reflection, so that a
// field added to Item is set too), its strings to s.
func fullItem(t *testing.T, s string) Item {
	var it Item
	v := reflect.ValueOf(&it).Elem()
	at := time.Date(2026, 11, 26, 3, 4, 5, 678900000, time.UTC)
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Interface().(type) {
		case string, State:
			f.SetString(s)
		case int, int64:
			f.SetInt(int64(i + 1))
		case []byte:
			f.SetBytes([]byte(`{ "text": "` + s + `" }`))
		case time.Time:
			f.Set(reflect.ValueOf(at.Add(time.Duration(i) * time.Second)))
		case *Reason:
			f.Set(reflect.ValueOf(&Reason{Stage: s, Class: "final", Error: s, Attempts: 3, At: at}))
		default:
			t.Fatalf("Item.%s: a field of type %s: teach fullItem and appendItemJSON about it", v.Type().Field(i).Name, f.Type())
		}
	}
	return it
}

// TestItemJSONMatchesMarshal checks that Item's hand-written JSON is the
// JSON of reflection byte for byte: with every field set, with each one in
// turn zero, with strings that need escaping, and with bytes that are not
// JSON.
func TestItemJSONMatchesMarshal(t *testing.T) {
	check := func(name string, it Item) {
		t.Helper()
		want, err := marshalItemJSON(it)
		if err != nil {
			t.Fatalf("%s: json.Marshal: %v", name, err)
		}
		got, err := it.MarshalJSON()
		if err != nil || string(got) != string(want) {
			t.Errorf("%s:\n got %s, %v\nwant %s", name, got, err, want)
		}
		if got, err := it.AppendJSON([]byte("x")); err != nil || string(got) != "x"+string(want) {
			t.Errorf("%s: AppendJSON = %s, %v", name, got, err)
		}
	}
	check("zero", Item{})
	for _, s := range []string{"plain", `<b>"quoted" & \back</b>`, "é\u2028\x01", "bad \xff"} {
		full := fullItem(t, s)
		check("full "+s, full)
		v := reflect.ValueOf(full)
		for i := range v.NumField() {
			it := full
			reflect.ValueOf(&it).Elem().Field(i).SetZero()
			check(v.Type().Field(i).Name+" zero, "+s, it)
		}
	}
	it := fullItem(t, "x")
	it.Payload, it.Input = []byte{0xff, 0}, []byte{}
	check("bytes not JSON", it)
	it.Payload, it.Input = []byte(`[1, 2]`), []byte(`"a<b"`)
	check("JSON to compact", it)

	bad := fullItem(t, "x")
	bad.UpdatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := bad.MarshalJSON(); err == nil {
		t.Error("an item updated in year 10000 marshaled; json.Marshal fails")
	}
}

func BenchmarkItemMarshalJSON(b *testing.B) {
	now := time.Now().UTC()
	it := Item{ID: 12345, RunID: 7, Pipeline: "bulk", Key: "doc-00012", Stage: "summarize", State: StateSucceeded,
		Attempt: 1, EnqueuedAt: now, OrderAt: now, NextAt: now, UpdatedAt: now}
	b.Run("append", func(b *testing.B) {
		for b.Loop() {
			_, _ = it.MarshalJSON()
		}
	})
	b.Run("reflect", func(b *testing.B) {
		for b.Loop() {
			_, _ = marshalItemJSON(it)
		}
	})
}
