package storetest

import (
	"bytes"
	"time"

	"github.com/redrive/redrive"
)

// testOutboxOutput checks that an item.succeeded notification carries the
// item's output, written with it in the completion's transaction, up to
// redrive.MaxNotificationOutput bytes, and only its size beyond; that
// callbacks carry it too; and that other events carry none.
func testOutboxOutput(h *h) {
	o := h.outbox()
	if err := o.Subscribe(h.ctx, "p", []string{redrive.EventItemSucceeded, redrive.EventItemDead}, Base); err != nil {
		h.Fatalf("Subscribe: %v", err)
	}
	r := h.run("p", "")
	max := redrive.MaxNotificationOutput
	outputs := map[string][]byte{
		"json":  []byte(`{"answer": 42}`),
		"bytes": {'o', 'k', 0xff, 0},
		"limit": bytes.Repeat([]byte{'a'}, max),
		"over":  bytes.Repeat([]byte{'b'}, max+1),
	}
	keys := []string{"json", "bytes", "limit", "over", "dead"}
	var items []redrive.NewItem
	for _, k := range keys {
		it := redrive.NewItem{Key: k, Payload: []byte(`{"in":1}`)}
		if k == "json" {
			it.Callback = "https://cb.example/json"
		}
		items = append(items, it)
	}
	h.enqueue(r, "a", Base, items...)
	t1 := at(time.Second)
	for _, l := range h.claimAll("p", Base) {
		if l.Item.Key == "dead" {
			h.complete(kill(l, t1, "final", "no"))
			continue
		}
		c := succeed(l, t1)
		c.Payload = outputs[l.Item.Key]
		h.complete(c)
	}
	byKey := map[string][]redrive.Notification{}
	for _, n := range h.notifications(redrive.NotificationFilter{Pipeline: "p"}) {
		byKey[n.ItemKey] = append(byKey[n.ItemKey], n)
	}
	// Claims return the output too: that is what a delivery sends.
	claimed, err := o.ClaimNotifications(h.ctx, redrive.ClaimRequest{Owner: "t", Pipelines: []string{"p"}, Limit: 100,
		Now: at(2 * time.Second), LeaseUntil: at(time.Minute)})
	if err != nil {
		h.Fatalf("ClaimNotifications: %v", err)
	}
	if len(claimed) != 6 {
		h.Fatalf("claimed %d notifications, want 6 (5 items, and the callback of one)", len(claimed))
	}
	for _, n := range claimed {
		byKey["claimed "+n.ItemKey] = append(byKey["claimed "+n.ItemKey], n)
	}
	for _, prefix := range []string{"", "claimed "} {
		for _, k := range keys {
			ns := byKey[prefix+k]
			want := 1
			if k == "json" {
				want = 2 // the webhook's and the callback's
			}
			if len(ns) != want {
				h.Fatalf("%s%s: %d notifications, want %d", prefix, k, len(ns), want)
			}
			for _, n := range ns {
				switch k {
				case "dead":
					if n.Output != nil || n.OutputSize != 0 || n.OutputOmitted {
						h.Errorf("%sitem.dead carries output %q (size %d, omitted %v)", prefix, n.Output, n.OutputSize, n.OutputOmitted)
					}
				case "over":
					if n.Output != nil || n.OutputSize != max+1 || !n.OutputOmitted {
						h.Errorf("%soutput of %d bytes: carried %d bytes, size %d, omitted %v; want left out with its size",
							prefix, max+1, len(n.Output), n.OutputSize, n.OutputOmitted)
					}
				default:
					if !bytes.Equal(n.Output, outputs[k]) || n.OutputSize != len(outputs[k]) || n.OutputOmitted {
						h.Errorf("%s%s: output %.40q (size %d, omitted %v), want %.40q", prefix, k, n.Output, n.OutputSize,
							n.OutputOmitted, outputs[k])
					}
				}
			}
		}
	}
}
