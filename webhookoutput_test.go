package redrive_test

import (
	"encoding/json"
	"testing"

	"github.com/redrive/redrive"
)

// TestNotificationBodyOutput checks the output of an item.succeeded body:
// JSON inline, other bytes in base64 named so, and a left-out output
// flagged with its size and the item's URL.
func TestNotificationBodyOutput(t *testing.T) {
	body := func(n redrive.Notification) map[string]json.RawMessage {
		t.Helper()
		n.Event, n.ItemID, n.DeliveryID = redrive.EventItemSucceeded, 42, "d"
		b, err := redrive.NotificationBody(n)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Item map[string]json.RawMessage `json:"item"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return v.Item
	}
	it := body(redrive.Notification{Output: []byte(`{"a": 1}`), OutputSize: 8})
	if string(it["output"]) != `{"a":1}` || string(it["output_encoding"]) != `"json"` || string(it["output_size"]) != "8" {
		t.Errorf("JSON output: %v", it)
	}
	it = body(redrive.Notification{Output: []byte{0xff, 'a'}, OutputSize: 2})
	if string(it["output"]) != `"/2E="` || string(it["output_encoding"]) != `"base64"` {
		t.Errorf("binary output: %v", it)
	}
	it = body(redrive.Notification{Output: []byte{}})
	if string(it["output"]) != `""` || string(it["output_encoding"]) != `"base64"` {
		t.Errorf("empty output: %v", it)
	}
	it = body(redrive.Notification{OutputOmitted: true, OutputSize: 70000})
	if _, ok := it["output"]; ok || string(it["output_omitted"]) != "true" || string(it["output_size"]) != "70000" ||
		string(it["url"]) != `"/api/v1/items/42"` {
		t.Errorf("left-out output: %v", it)
	}
	it = body(redrive.Notification{}) // written before outputs were kept
	for _, k := range []string{"output", "output_encoding", "output_omitted", "url"} {
		if _, ok := it[k]; ok {
			t.Errorf("notification without an output has %s: %v", k, it)
		}
	}
}
