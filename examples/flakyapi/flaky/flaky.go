// Package flaky is a fake model endpoint that fails on purpose: it answers
// POST /v1/complete with rate limits (429 and Retry-After), server errors
// (500), answers too slow for a client's timeout, and malformed JSON, at
// configured rates. It backs the flakyapi command, the llm-batch example
// and the runner's tests.
//
// Besides the random faults it can enforce a real rate limit (Options.Limit):
// a token bucket shared by all clients, which answers 429 with the
// Retry-After of the next free token once the rate is exceeded, as a model
// provider's quota does.
//
// The random answers are deterministic given the seed: the answer to a
// request let through by the rate limit depends only on Options.Seed, the
// request body and how many times that same body was let through before,
// not on the order in which concurrent requests arrive. Whether a request
// is over the limit depends on timing.
package flaky

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redrive/redrive/internal/tokenbucket"
)

// Options configure the handler. Zero values take the stated defaults; all
// rates are fractions in [0, 1] whose sum must not exceed 1.
type Options struct {
	// Rate429 is the share of requests answered 429 Too Many Requests with
	// a Retry-After header. Default 0.
	Rate429 float64
	// Rate500 is the share answered 500 Internal Server Error. Default 0.
	Rate500 float64
	// RateSlow is the share answered only after Slow (then successfully),
	// so that a client with a shorter timeout gives up. Default 0.
	RateSlow float64
	// RateMalformed is the share answered 200 with a body that is not
	// valid JSON. Default 0.
	RateMalformed float64
	// RetryAfter is the wait announced by 429 answers, sent in whole
	// seconds (rounded up, at least 1). Default 1 s.
	RetryAfter time.Duration
	// Slow is how long slow answers take. Default 5 s.
	Slow time.Duration
	// Seed makes the answers deterministic. Default 0 (itself a fixed seed).
	Seed uint64
	// Limit is the requests per second POST /v1/complete accepts, enforced
	// by a token bucket before any random fault; requests over it are
	// answered 429 with a Retry-After of whole seconds (at least 1) until
	// the next token. Default 0: no limit.
	Limit float64
	// Burst is the token bucket's size. Default: Limit.
	Burst int
}

// Validate reports rates outside [0, 1] or summing above 1, and negative
// durations.
func (o Options) Validate() error {
	sum := 0.0
	for _, r := range []struct {
		name string
		v    float64
	}{{"rate-429", o.Rate429}, {"rate-500", o.Rate500}, {"rate-slow", o.RateSlow}, {"rate-malformed", o.RateMalformed}} {
		if math.IsNaN(r.v) || r.v < 0 || r.v > 1 {
			return fmt.Errorf("flaky: %s %v is outside [0, 1]", r.name, r.v)
		}
		sum += r.v
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("flaky: the rates sum to %v, more than 1", sum)
	}
	if o.RetryAfter < 0 || o.Slow < 0 {
		return fmt.Errorf("flaky: negative retry-after or slow duration")
	}
	if math.IsNaN(o.Limit) || o.Limit < 0 || o.Burst < 0 {
		return fmt.Errorf("flaky: negative limit or burst")
	}
	return nil
}

// Kind is the kind of answer the handler gave.
type Kind string

// The kinds of answers.
const (
	KindOK         Kind = "ok"
	KindRateLimit  Kind = "429"
	KindServer     Kind = "500"
	KindSlow       Kind = "slow"
	KindMalformed  Kind = "malformed"
	KindBadRequest Kind = "400"
	// KindOverLimit is a 429 of the rate limit (Options.Limit), not a
	// random one.
	KindOverLimit Kind = "over_limit"
)

// Request is the body POST /v1/complete expects.
type Request struct {
	// Prompt is required and must not be empty.
	Prompt string `json:"prompt"`
	// MaxTokens bounds the completion's words. Default 0: no bound.
	MaxTokens int `json:"max_tokens,omitempty"`
}

// Response is the body of a successful answer.
type Response struct {
	// Completion is the prompt's words in reverse order (at most
	// MaxTokens of them).
	Completion string `json:"completion"`
	// Model is always "flaky-1".
	Model string `json:"model"`
	// Tokens counts the completion's words.
	Tokens int `json:"tokens"`
}

// Handler is the fake endpoint. Create it with NewHandler.
type Handler struct {
	opts Options
	mux  *http.ServeMux

	bucket *tokenbucket.Bucket // nil without a limit

	mu     sync.Mutex
	seen   map[[32]byte]uint64
	counts map[Kind]int
}

// NewHandler returns the endpoint: POST /v1/complete, GET /healthz and
// GET /stats (the answers given so far by kind, as JSON). Invalid options
// are clamped: use Options.Validate to reject them instead.
func NewHandler(o Options) *Handler {
	if o.RetryAfter <= 0 {
		o.RetryAfter = time.Second
	}
	if o.Slow <= 0 {
		o.Slow = 5 * time.Second
	}
	h := &Handler{opts: o, mux: http.NewServeMux(), seen: map[[32]byte]uint64{}, counts: map[Kind]int{}}
	if o.Limit > 0 {
		burst := o.Burst
		if burst <= 0 {
			burst = int(math.Ceil(o.Limit))
		}
		h.bucket = tokenbucket.New(o.Limit, burst, time.Now())
	}
	h.mux.HandleFunc("POST /v1/complete", h.complete)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok\n")
	})
	h.mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(h.Stats())
	})
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Stats returns how many answers of each kind were given so far.
func (h *Handler) Stats() map[Kind]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[Kind]int, len(h.counts))
	for k, v := range h.counts {
		out[k] = v
	}
	return out
}

// Decide returns the kind of answer for the n-th (0-based) request with
// this body under seed: a pure function, exposed for tests.
func Decide(o Options, body []byte, n uint64) Kind {
	u := draw(o.Seed, sha256.Sum256(body), n)
	switch {
	case u < o.Rate429:
		return KindRateLimit
	case u < o.Rate429+o.Rate500:
		return KindServer
	case u < o.Rate429+o.Rate500+o.RateSlow:
		return KindSlow
	case u < o.Rate429+o.Rate500+o.RateSlow+o.RateMalformed:
		return KindMalformed
	}
	return KindOK
}

// draw returns a uniform number in [0, 1) from the seed, body hash and count.
func draw(seed uint64, sum [32]byte, n uint64) float64 {
	var b [48]byte
	copy(b[:32], sum[:])
	binary.LittleEndian.PutUint64(b[32:], seed)
	binary.LittleEndian.PutUint64(b[40:], n)
	d := sha256.Sum256(b[:])
	return float64(binary.LittleEndian.Uint64(d[:8])>>11) / (1 << 53)
}

func (h *Handler) count(k Kind) {
	h.mu.Lock()
	h.counts[k]++
	h.mu.Unlock()
}

func (h *Handler) complete(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		h.count(KindBadRequest)
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "reading body: " + err.Error()})
		return
	}
	var req Request
	if err := json.Unmarshal(body, &req); err != nil || strings.TrimSpace(req.Prompt) == "" {
		h.count(KindBadRequest)
		msg := "prompt is required"
		if err != nil {
			msg = "invalid JSON: " + err.Error()
		}
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": msg})
		return
	}
	if h.bucket != nil {
		if ok, wait := h.bucket.Take(time.Now()); !ok {
			h.count(KindOverLimit)
			secs := int64(math.Ceil(wait.Seconds()))
			w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
			writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "rate limit exceeded: " + strconv.FormatFloat(h.opts.Limit, 'g', -1, 64) + " requests/s"})
			return
		}
	}
	sum := sha256.Sum256(body)
	h.mu.Lock()
	n := h.seen[sum]
	h.seen[sum] = n + 1
	h.mu.Unlock()

	kind := Decide(h.opts, body, n)
	h.count(kind)
	switch kind {
	case KindRateLimit:
		secs := int64(math.Ceil(h.opts.RetryAfter.Seconds()))
		w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "rate limit exceeded"})
		return
	case KindServer:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal server error"})
		return
	case KindMalformed:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"completion": "`+req.Prompt[:len(req.Prompt)/2])
		return
	case KindSlow:
		if !sleep(r.Context(), h.opts.Slow) {
			return // the client gave up
		}
	}
	writeJSON(w, http.StatusOK, complete(req))
}

// complete makes the deterministic completion of a request.
func complete(req Request) Response {
	words := strings.Fields(req.Prompt)
	if req.MaxTokens > 0 && len(words) > req.MaxTokens {
		words = words[:req.MaxTokens]
	}
	for i, j := 0, len(words)-1; i < j; i, j = i+1, j-1 {
		words[i], words[j] = words[j], words[i]
	}
	return Response{Completion: strings.Join(words, " "), Model: "flaky-1", Tokens: len(words)}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
