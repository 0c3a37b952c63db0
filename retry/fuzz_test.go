package retry

import (
	"math"
	"testing"
	"time"
)

func FuzzPolicyValidate(f *testing.F) {
	f.Add(0, uint8(0), int64(0), 0.0, int64(0), 0.0, uint8(0), 1, 0.5)
	f.Add(4, uint8(0), int64(30*time.Second), 4.0, int64(0), 0.2, uint8(0), 3, 0.99)
	f.Add(8, uint8(0), int64(time.Minute), 2.0, int64(time.Hour), 0.0, uint8(1), 7, 0.0)
	f.Add(3, uint8(2), int64(time.Second), 1.0, int64(30*time.Second), 1.0, uint8(4), 1000, 0.3)
	f.Add(-1, uint8(9), int64(-5), math.NaN(), int64(math.MaxInt64), 7.0, uint8(3), math.MaxInt, 1.0)
	f.Add(100, uint8(0), int64(1), 1e300, int64(math.MaxInt64), 0.5, uint8(2), 64, 0.7)
	f.Fuzz(func(t *testing.T, attempts int, backoff uint8, base int64, mult float64, maxd int64, jitter float64, mode uint8, attempt int, r float64) {
		p := Policy{MaxAttempts: attempts, Backoff: Backoff(backoff), BaseDelay: time.Duration(base), Multiplier: mult,
			MaxDelay: time.Duration(maxd), Jitter: jitter, JitterMode: JitterMode(mode), Rand: fixedSource(r)}
		if err := p.Validate(); err != nil {
			return // invalid policies are rejected, never used
		}
		if p.Attempts() < 1 {
			t.Fatalf("Attempts() = %d", p.Attempts())
		}
		n := p.Nominal(attempt)
		lo, hi := p.Bounds(attempt)
		d := p.Delay(attempt)
		capd := p.MaxDelay
		if capd == 0 {
			capd = DefaultMaxDelay
		}
		if n < 0 || n > capd {
			t.Fatalf("Nominal(%d) = %v outside [0, %v]", attempt, n, capd)
		}
		if lo < 0 || lo > hi || hi > capd {
			t.Fatalf("Bounds(%d) = [%v, %v], cap %v", attempt, lo, hi, capd)
		}
		if d < lo || d > hi {
			t.Fatalf("Delay(%d) = %v outside [%v, %v]", attempt, d, lo, hi)
		}
		if p.JitterMode == JitterNone && d != n {
			t.Fatalf("JitterNone: Delay %v != Nominal %v", d, n)
		}
		if attempt >= 1 && attempt < math.MaxInt && p.Nominal(attempt+1) < n && p.Backoff != BackoffConstant {
			t.Fatalf("schedule decreases at %d: %v < %v", attempt, p.Nominal(attempt+1), n)
		}
		rl := p.RateLimitDelay(time.Duration(base), attempt)
		if rl < 0 || rl > DefaultMaxRateLimitWait {
			t.Fatalf("RateLimitDelay = %v", rl)
		}
	})
}
