package redrive

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// WebhookFormat is how a webhook's requests are signed.
type WebhookFormat string

// Webhook formats.
const (
	// FormatRedrive signs with the Redrive-Signature header (Sign,
	// VerifySignature), keyed with the secret's bytes as given. It is the
	// default, so that receivers written before formats existed go on
	// working.
	FormatRedrive WebhookFormat = "redrive"
	// FormatStandard signs as Standard Webhooks (standardwebhooks.com)
	// does, so that receivers verify with its maintained libraries (npm
	// standardwebhooks, the Go package
	// github.com/standard-webhooks/standard-webhooks/libraries/go, svix):
	// headers webhook-id (the delivery ID), webhook-timestamp (unix
	// seconds of the attempt) and webhook-signature ("v1," and the base64
	// HMAC-SHA256 of "id.timestamp.body"). The secret must be "whsec_"
	// followed by the base64 of the key, as those libraries take it.
	// Redrive-Signature is sent beside them, keyed with the secret as
	// given, so that a receiver can move from one check to the other
	// without a flag day.
	FormatStandard WebhookFormat = "standard"
)

// Headers of FormatStandard requests.
const (
	// HeaderWebhookID carries the delivery ID, the same on every delivery
	// of a notification (Standard Webhooks' message ID).
	HeaderWebhookID = "webhook-id"
	// HeaderWebhookTimestamp carries the unix time in seconds of the
	// attempt.
	HeaderWebhookTimestamp = "webhook-timestamp"
	// HeaderWebhookSignature carries "v1,<base64 HMAC-SHA256>".
	HeaderWebhookSignature = "webhook-signature"
)

// StandardSecretPrefix starts every FormatStandard secret.
const StandardSecretPrefix = "whsec_"

// MinStandardKeyBytes is the shortest key a FormatStandard secret may
// hold: Standard Webhooks asks for 24 to 64 random bytes.
const MinStandardKeyBytes = 24

// ErrStandardSecret is wrapped by the errors of a secret that is not
// "whsec_" followed by the base64 of a key of at least
// MinStandardKeyBytes bytes.
var ErrStandardSecret = errors.New(`a standard webhook secret must be "whsec_" followed by the base64 of at least 24 random bytes`)

// standardKey returns the key of a FormatStandard secret.
func standardKey(secret []byte) ([]byte, error) {
	enc, ok := strings.CutPrefix(string(secret), StandardSecretPrefix)
	if !ok {
		return nil, ErrStandardSecret
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(key) < MinStandardKeyBytes {
		return nil, ErrStandardSecret
	}
	return key, nil
}

// SignStandard returns the value of the webhook-signature header of a
// FormatStandard request: "v1," and the base64 HMAC-SHA256, keyed with the
// key of secret ("whsec_<base64>"), of msgID, '.', the unix seconds of t,
// '.', and body.
func SignStandard(secret []byte, msgID string, t time.Time, body []byte) (string, error) {
	key, err := standardKey(secret)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msgID))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.FormatInt(t.Unix(), 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)), nil
}
