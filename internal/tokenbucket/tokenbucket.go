// Package tokenbucket is the token bucket of the loopback servers that play a rate-limited
// dependency: the benchmarks' server (internal/loadbench) and the main job's flaky model API
// (examples/flakyapi).
package tokenbucket

import (
	"sync"
	"time"
)

// Bucket is a token bucket: it refills at Rate tokens per second up to Burst tokens and
// starts full. It is safe for concurrent use.
type Bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

// New returns a full bucket of burst tokens refilled at rate per second. A burst
// below 1 is taken as 1.
func New(rate float64, burst int, now time.Time) *Bucket {
	b := float64(max(burst, 1))
	return &Bucket{rate: rate, burst: b, tokens: b, last: now}
}

// Take takes one token at now. When none is left it reports false and how long until one
// is.
func (b *Bucket) Take(now time.Time) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
}
