package redrive

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Webhook request headers.
const (
	// HeaderSignature carries "t=UNIX,v1=HEX": the unix time of the
	// delivery and the hex HMAC-SHA256, keyed with the webhook's secret, of
	// the time, a '.', and the body.
	HeaderSignature = "Redrive-Signature"
	// HeaderDelivery carries the notification's delivery ID, the same on
	// every delivery of it: receivers deduplicate by it.
	HeaderDelivery = "Redrive-Delivery"
	// HeaderEvent carries the notification's event, such as "item.dead".
	HeaderEvent = "Redrive-Event"
)

// DefaultSignatureTolerance is how far from now VerifySignature accepts a
// signature's time by default: 5 minutes.
const DefaultSignatureTolerance = 5 * time.Minute

// Errors of VerifySignature.
var (
	// ErrSignatureMalformed: the header is not "t=UNIX,v1=HEX".
	ErrSignatureMalformed = errors.New("redrive: malformed webhook signature")
	// ErrSignatureMismatch: no v1 value is the body's signature.
	ErrSignatureMismatch = errors.New("redrive: webhook signature does not match")
	// ErrSignatureExpired: the signature's time is outside the tolerance,
	// so it may be a replay.
	ErrSignatureExpired = errors.New("redrive: webhook signature timestamp outside the tolerance")
)

// Sign returns the value of the Redrive-Signature header for body sent
// at t with secret.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(signature(secret, ts, body))
}

func signature(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// VerifySignature checks a Redrive-Signature header against body and
// secret: one of its v1 values must be the HMAC of its t and body, compared
// in constant time, and t must be within tolerance of now (tolerance 0
// means DefaultSignatureTolerance). Receivers verify the raw body, before
// parsing it.
func VerifySignature(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultSignatureTolerance
	}
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("%w: %q is not key=value", ErrSignatureMalformed, part)
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil {
				return fmt.Errorf("%w: v1 is not hex", ErrSignatureMalformed)
			}
			sigs = append(sigs, b)
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: want t=UNIX,v1=HEX", ErrSignatureMalformed)
	}
	want := signature(secret, ts, body)
	ok := false
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			ok = true
		}
	}
	if !ok {
		return ErrSignatureMismatch
	}
	if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %s ago", ErrSignatureExpired, d.Round(time.Second))
	}
	return nil
}
