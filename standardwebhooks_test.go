package redrive_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/redrive/redrive"
)

// TestSignStandard checks SignStandard against the test vector of Standard
// Webhooks' libraries, and against the Go library's verification.
func TestSignStandard(t *testing.T) {
	const (
		secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		msgID  = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		want   = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	payload := []byte(`{"test": 2432232314}`)
	got, err := redrive.SignStandard([]byte(secret), msgID, time.Unix(1614265330, 0), payload)
	if err != nil || got != want {
		t.Errorf("SignStandard = %q, %v; want the spec's %q", got, err, want)
	}

	now := time.Now()
	sig, err := redrive.SignStandard([]byte(secret), "d-1", now, payload)
	if err != nil {
		t.Fatal(err)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", "d-1")
	h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	h.Set("webhook-signature", sig)
	if err := wh.Verify(payload, h); err != nil {
		t.Errorf("the Go library refuses SignStandard's signature: %v", err)
	}
	h.Set("webhook-id", "d-2")
	if err := wh.Verify(payload, h); err == nil {
		t.Errorf("the Go library accepted a signature of another message ID")
	}

	for _, bad := range []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!", "whsec_c2hvcnQ="} {
		if _, err := redrive.SignStandard([]byte(bad), "d", now, payload); !errors.Is(err, redrive.ErrStandardSecret) {
			t.Errorf("secret %q: err = %v, want ErrStandardSecret", bad, err)
		}
		w := redrive.Webhook{Pipeline: "p", URL: "http://127.0.0.1:1/", Secret: []byte(bad), Format: redrive.FormatStandard}
		if err := w.Validate(); err == nil || strings.Contains(err.Error(), bad) {
			t.Errorf("Validate with secret %q: %v (must refuse it without showing it)", bad, err)
		}
	}
}
