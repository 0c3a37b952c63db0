package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/redrive/redrive"
)

// A submit's Idempotency-Key is bound to the request it first came with
// (redrive.RequestKey): its endpoint, pipeline, run and items, hashed. A
// request that repeats the key and the request is a retry and answers as
// the first did (the same run and items); a request that reuses the key for
// anything else is refused with 422 and changes nothing, where it used to be
// taken for a retry whose new items were dropped without a word.

// ReplayedHeader is set to "true" on the answer to a retry: a request whose
// Idempotency-Key was bound to the same request before.
const ReplayedHeader = "Idempotent-Replayed"

// canonicalRequest is what a request key's hash covers: what the request
// asks for, in a form that two sendings of one request share whatever their
// whitespace, field order and left-out defaults.
type canonicalRequest struct {
	Endpoint string              `json:"endpoint"`
	Pipeline string              `json:"pipeline"`
	Run      string              `json:"run,omitempty"`
	RunID    int64               `json:"run_id,omitempty"`
	Options  *redrive.RunOptions `json:"options,omitempty"`
	Items    []canonicalItem     `json:"items"`
}

type canonicalItem struct {
	Key      string          `json:"key"`
	Input    json.RawMessage `json:"input"`
	Priority int             `json:"priority"`
	OrderAt  int64           `json:"order_at"`
	Callback string          `json:"callback"`
}

// hash returns the hex SHA-256 of the canonical form of the request.
func (c canonicalRequest) hash(items []redrive.NewItem) (string, error) {
	c.Items = make([]canonicalItem, len(items))
	for i, it := range items {
		in, err := canonicalJSON(it.Payload)
		if err != nil {
			return "", fmt.Errorf("%s.input: %w", itemField(i), err)
		}
		c.Items[i] = canonicalItem{Key: it.Key, Input: in, Priority: it.Priority, Callback: it.Callback}
		if !it.OrderAt.IsZero() {
			c.Items[i].OrderAt = it.OrderAt.UnixNano()
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// canonicalJSON re-encodes a JSON value with its objects' fields sorted and
// no insignificant whitespace; numbers keep their text.
func canonicalJSON(b []byte) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// keyReused is the answer to a request whose Idempotency-Key was bound to
// another request.
func keyReused(w http.ResponseWriter, key string, bound redrive.RequestKey) {
	writeError(w, http.StatusUnprocessableEntity, "Idempotency-Key", fmt.Sprintf(
		"Idempotency-Key %q was used for another request (to run %d, with other items, run or pipeline): a retry must repeat its request exactly, and a new request needs a new key",
		key, bound.RunID))
}

// requestKey is the Idempotency-Key of one request with the hash of the
// request, and what the store knew of the key before the request ran.
type requestKey struct {
	key, hash string
	// replay is true when the key was bound to this same request.
	replay bool
}

// lookUpKey reads the binding of the request's key, before the request
// writes anything: a key bound to another request answers 422 here, and
// ok is false. With no key, it returns a zero requestKey.
func (s *server) lookUpKey(w http.ResponseWriter, r *http.Request, key string, c canonicalRequest, items []redrive.NewItem) (rk requestKey, ok bool) {
	if key == "" {
		return rk, true
	}
	hash, err := c.hash(items)
	if err != nil {
		// The items were read as JSON already; this is not the client's.
		s.fail(w, r, "submit", err)
		return rk, false
	}
	rk = requestKey{key: key, hash: hash}
	bound, err := s.store.RequestKey(r.Context(), key)
	switch {
	case errors.Is(err, redrive.ErrNotFound):
		return rk, true
	case err != nil:
		s.fail(w, r, "submit", err)
		return rk, false
	case bound.Hash != hash:
		keyReused(w, key, bound)
		return rk, false
	}
	rk.replay = true
	return rk, true
}

// bind binds the request's key to the request and run. Another request
// that bound the key first, between lookUpKey and now, wins: the answer is
// 422 and ok false; a run this request created for nothing is finished at
// once, empty.
func (s *server) bind(w http.ResponseWriter, r *http.Request, rk requestKey, run redrive.Run, created bool) bool {
	if rk.key == "" || rk.replay {
		return true
	}
	ctx := context.WithoutCancel(r.Context())
	bound, err := s.store.BindRequestKey(ctx, redrive.RequestKey{Key: rk.key, Hash: rk.hash, RunID: run.ID, CreatedAt: s.opts.Now()})
	if err != nil {
		s.fail(w, r, "submit", err)
		return false
	}
	if bound.Hash == rk.hash {
		return true
	}
	if created {
		s.finishEmpty(ctx, run, fmt.Sprintf("no items: the request that created it was refused (its Idempotency-Key %q was bound to another request)", rk.key))
	}
	keyReused(w, rk.key, bound)
	return false
}
