package retry

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Defaults applied by Policy to its zero-valued fields.
const (
	// DefaultMaxAttempts is the number of attempts, including the first, when Policy.MaxAttempts is 0.
	DefaultMaxAttempts = 3
	// DefaultBaseDelay is the first retry delay when Policy.BaseDelay is 0.
	DefaultBaseDelay = time.Second
	// DefaultMultiplier is the exponential growth factor when Policy.Multiplier is 0.
	DefaultMultiplier = 2.0
	// DefaultMaxDelay caps one delay when Policy.MaxDelay is 0.
	DefaultMaxDelay = 60 * time.Second
	// DefaultJitter is the ± fraction of JitterProportional when Policy.Jitter is 0.
	DefaultJitter = 0.2
	// DefaultMaxRateLimitWait caps one Retry-After wait when Policy.MaxRateLimitWait is 0.
	DefaultMaxRateLimitWait = 5 * time.Minute
	// DefaultMaxRateLimitWaits bounds the rate-limited waits that do not consume attempts
	// when Policy.MaxRateLimitWaits is 0.
	DefaultMaxRateLimitWaits = 10
	// NoMaxDelay, used as Policy.MaxDelay, removes the cap on one delay
	// (the delay still saturates at the largest time.Duration).
	NoMaxDelay = time.Duration(math.MaxInt64)
)

// Sentinel errors. Errors returned by this package wrap them; test with errors.Is.
var (
	// ErrInvalidPolicy is wrapped by every error of Policy.Validate.
	ErrInvalidPolicy = errors.New("retry: invalid policy")
	// ErrBudgetExhausted is wrapped by the error of Do when the retry budget refused a retry.
	ErrBudgetExhausted = errors.New("retry: retry budget exhausted")
	// ErrCircuitOpen is returned by Breaker.Allow, and wrapped by the error of Do,
	// when the circuit breaker refuses calls.
	ErrCircuitOpen = errors.New("retry: circuit open")
)

// Backoff is the shape of the nominal delay schedule. The zero value is BackoffExponential.
type Backoff uint8

const (
	// BackoffExponential: BaseDelay × Multiplier^(attempt-1). The default.
	BackoffExponential Backoff = iota
	// BackoffConstant: BaseDelay after every attempt.
	BackoffConstant
	// BackoffLinear: BaseDelay × attempt.
	BackoffLinear
)

var backoffNames = [...]string{"exponential", "constant", "linear"}

// String returns "exponential", "constant" or "linear".
func (b Backoff) String() string {
	if int(b) < len(backoffNames) {
		return backoffNames[b]
	}
	return fmt.Sprintf("Backoff(%d)", uint8(b))
}

// ParseBackoff parses the String form of a Backoff (case-insensitive); "" is exponential.
// "fixed" is accepted for constant and "exp" for exponential.
func ParseBackoff(s string) (Backoff, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "exponential", "exp":
		return BackoffExponential, nil
	case "constant", "fixed":
		return BackoffConstant, nil
	case "linear":
		return BackoffLinear, nil
	}
	return 0, fmt.Errorf("%w: unknown backoff %q (want constant, linear or exponential)", ErrInvalidPolicy, s)
}

// MarshalText implements encoding.TextMarshaler.
func (b Backoff) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseBackoff.
func (b *Backoff) UnmarshalText(t []byte) error {
	v, err := ParseBackoff(string(t))
	if err == nil {
		*b = v
	}
	return err
}

// JitterMode is how a nominal delay is randomised. The zero value is JitterProportional.
type JitterMode uint8

const (
	// JitterProportional draws uniformly from nominal × [1-Jitter, 1+Jitter]. The default.
	JitterProportional JitterMode = iota
	// JitterNone uses the nominal delay as is.
	JitterNone
	// JitterFull draws uniformly from [0, nominal].
	JitterFull
	// JitterEqual draws uniformly from [nominal/2, nominal].
	JitterEqual
	// JitterDecorrelated draws uniformly from [BaseDelay, 3 × nominal of the previous attempt]
	// (a stateless form of AWS's "decorrelated jitter"; the nominal before attempt 1 is BaseDelay).
	JitterDecorrelated
)

var jitterNames = [...]string{"proportional", "none", "full", "equal", "decorrelated"}

// String returns "proportional", "none", "full", "equal" or "decorrelated".
func (m JitterMode) String() string {
	if int(m) < len(jitterNames) {
		return jitterNames[m]
	}
	return fmt.Sprintf("JitterMode(%d)", uint8(m))
}

// ParseJitterMode parses the String form of a JitterMode (case-insensitive); "" is proportional.
func ParseJitterMode(s string) (JitterMode, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return JitterProportional, nil
	}
	for i, n := range jitterNames {
		if t == n {
			return JitterMode(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown jitter mode %q (want none, proportional, full, equal or decorrelated)", ErrInvalidPolicy, s)
}

// MarshalText implements encoding.TextMarshaler.
func (m JitterMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseJitterMode.
func (m *JitterMode) UnmarshalText(t []byte) error {
	v, err := ParseJitterMode(string(t))
	if err == nil {
		*m = v
	}
	return err
}

// Source is a source of uniformly distributed random numbers in [0,1).
// *math/rand/v2.Rand satisfies it. Implementations used by concurrent callers must be
// safe for concurrent use (*rand.Rand is not).
type Source interface{ Float64() float64 }

// Policy describes how Do retries an operation. The zero value is a usable policy:
// 3 attempts, exponential backoff from 1s doubling up to 60s, ±20% jitter, the
// DefaultClassifier, no budget and no breaker. Policies are small values: copy and
// modify them freely; a Policy is safe for concurrent use if its Rand, Budget, Breaker
// and hooks are.
type Policy struct {
	// Name names the layer in its errors and events ("bigquery: gave up after 3
	// attempts ..."), so that nested layers say which one failed. Empty by default.
	Name string
	// MaxAttempts is the number of attempts including the first; 0 means 3, 1 means no retries.
	// Rate-limited waits (see MaxRateLimitWaits) do not consume attempts.
	MaxAttempts int
	// Backoff is the shape of the schedule; the zero value is BackoffExponential.
	Backoff Backoff
	// BaseDelay is the delay after the first failed attempt; 0 means 1s.
	BaseDelay time.Duration
	// Multiplier is the exponential growth factor; 0 means 2; must be >= 1.
	Multiplier float64
	// MaxDelay caps one delay, jitter included; 0 means 60s; NoMaxDelay means no cap.
	MaxDelay time.Duration
	// MaxElapsed bounds the total time of one Do, sleeps included: Do gives up rather than
	// start a sleep that would end past it. 0 means no limit.
	MaxElapsed time.Duration
	// Jitter is the ± fraction of JitterProportional, in [0,1]; 0 means 0.2
	// (use JitterMode JitterNone for no jitter).
	Jitter float64
	// JitterMode is how delays are randomised; the zero value is JitterProportional.
	JitterMode JitterMode
	// MaxRateLimitWait caps one wait for a RateLimited error's Retry-After; 0 means 5 minutes.
	MaxRateLimitWait time.Duration
	// MaxRateLimitWaits bounds the rate-limited waits that do not consume attempts; once it
	// is used up, rate-limited failures count as attempts. 0 means 10.
	MaxRateLimitWaits int
	// Classifier classifies errors that carry no explicit classification (Final, Retryable,
	// RateLimited, ClassedError always win). Nil means DefaultClassifier.
	Classifier Classifier
	// Independent makes Do retry on its own even inside another Do. By default (false) a Do
	// nested in another makes exactly one attempt and lets the outer layer decide.
	Independent bool
	// Exhausted says how an outer layer classifies this layer's error once its own
	// allowance ran out (attempts, rate-limit waits or MaxElapsed). The zero value,
	// ExhaustedKeepClass, passes the last error's class through; ExhaustedFinal, with
	// Independent, makes an inner layer own its failures: the outer layer does not retry
	// what the inner one already retried.
	Exhausted Exhaustion
	// Budget, if not nil, must grant every retry; it is shared by all callers of one dependency.
	Budget *Budget
	// Breaker, if not nil, must allow every attempt and is told every outcome.
	Breaker *Breaker
	// OnRetry, if not nil, is called before sleeping ahead of a retry. Nil by default.
	OnRetry func(Event)
	// OnGiveUp, if not nil, is called when Do returns an error. Nil by default.
	OnGiveUp func(Event)
	// Rand is the random source for jitter; nil means the concurrency-safe top-level
	// functions of math/rand/v2.
	Rand Source
}

func (p *Policy) attempts() int {
	if p.MaxAttempts <= 0 {
		return DefaultMaxAttempts
	}
	return p.MaxAttempts
}

func (p *Policy) base() time.Duration {
	if p.BaseDelay <= 0 {
		return DefaultBaseDelay
	}
	return p.BaseDelay
}

func (p *Policy) multiplier() float64 {
	if p.Multiplier == 0 || math.IsNaN(p.Multiplier) || p.Multiplier < 1 {
		return DefaultMultiplier
	}
	return p.Multiplier
}

func (p *Policy) maxDelay() time.Duration {
	if p.MaxDelay <= 0 {
		return DefaultMaxDelay
	}
	return p.MaxDelay
}

func (p *Policy) jitter() float64 {
	if !(p.Jitter > 0 && p.Jitter <= 1) { // also catches NaN
		return DefaultJitter
	}
	return p.Jitter
}

func (p *Policy) maxRateLimitWait() time.Duration {
	if p.MaxRateLimitWait <= 0 {
		return DefaultMaxRateLimitWait
	}
	return p.MaxRateLimitWait
}

func (p *Policy) maxRateLimitWaits() int {
	if p.MaxRateLimitWaits <= 0 {
		return DefaultMaxRateLimitWaits
	}
	return p.MaxRateLimitWaits
}

func (p *Policy) rand() float64 {
	if p.Rand != nil {
		r := p.Rand.Float64()
		if !(r >= 0) { // NaN or negative from a faulty source
			return 0
		}
		if r >= 1 {
			return math.Nextafter(1, 0)
		}
		return r
	}
	return rand.Float64()
}

// Validate reports whether p is meaningful. Zero fields are valid (they take defaults);
// the errors wrap ErrInvalidPolicy.
func (p Policy) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidPolicy}, a...)...))
	}
	if p.MaxAttempts < 0 {
		bad("MaxAttempts %d is negative (0 means %d)", p.MaxAttempts, DefaultMaxAttempts)
	}
	if p.Backoff > BackoffLinear {
		bad("unknown Backoff %d", p.Backoff)
	}
	if p.BaseDelay < 0 {
		bad("BaseDelay %v is negative", p.BaseDelay)
	}
	if math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0) || p.Multiplier < 0 || (p.Multiplier > 0 && p.Multiplier < 1) {
		bad("Multiplier %v must be >= 1 (0 means %v)", p.Multiplier, DefaultMultiplier)
	}
	if p.MaxDelay < 0 {
		bad("MaxDelay %v is negative", p.MaxDelay)
	}
	if p.BaseDelay > 0 && p.MaxDelay > 0 && p.MaxDelay < p.BaseDelay {
		bad("MaxDelay %v is less than BaseDelay %v", p.MaxDelay, p.BaseDelay)
	}
	if p.BaseDelay > DefaultMaxDelay && p.MaxDelay == 0 {
		bad("BaseDelay %v exceeds the default MaxDelay %v; set MaxDelay", p.BaseDelay, DefaultMaxDelay)
	}
	if p.MaxElapsed < 0 {
		bad("MaxElapsed %v is negative", p.MaxElapsed)
	}
	if math.IsNaN(p.Jitter) || p.Jitter < 0 || p.Jitter > 1 {
		bad("Jitter %v is outside [0, 1]", p.Jitter)
	}
	if p.JitterMode > JitterDecorrelated {
		bad("unknown JitterMode %d", p.JitterMode)
	}
	if p.MaxRateLimitWait < 0 {
		bad("MaxRateLimitWait %v is negative", p.MaxRateLimitWait)
	}
	if p.Exhausted > ExhaustedRetryable {
		bad("unknown Exhausted %d", p.Exhausted)
	}
	if p.MaxRateLimitWaits < 0 {
		bad("MaxRateLimitWaits %d is negative", p.MaxRateLimitWaits)
	}
	return errors.Join(errs...)
}

// Attempts returns MaxAttempts with its default (3) applied.
func (p Policy) Attempts() int { return p.attempts() }

// Nominal returns the unjittered delay, capped at MaxDelay, after attempt `attempt`
// (1-based) failed and before attempt+1. Attempts below 1 are treated as 1.
func (p Policy) Nominal(attempt int) time.Duration { return p.nominal(attempt) }

func (p *Policy) nominal(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	base, maxd := p.base(), p.maxDelay()
	if base >= maxd {
		return maxd
	}
	fb, fmax := float64(base), float64(maxd)
	var d float64
	switch p.Backoff {
	case BackoffConstant:
		return base
	case BackoffLinear:
		d = fb * float64(attempt)
	default:
		m := p.multiplier()
		if m == 1 {
			return base
		}
		if m == 2 && attempt <= 63 {
			// Doubling, the common case, in integers: no float loop.
			if base > maxd>>(attempt-1) {
				return maxd
			}
			return base << (attempt - 1)
		}
		d = fb
		if attempt <= 64 {
			for i := 1; i < attempt && d < fmax; i++ {
				d *= m
			}
		} else {
			d = fb * math.Pow(m, float64(attempt-1))
		}
	}
	if !(d < fmax) { // also NaN/Inf
		return maxd
	}
	return min(time.Duration(d), maxd) // float rounding near the largest Duration
}

// bounds returns the jitter range as floats (nanoseconds), lo <= hi <= MaxDelay.
func (p *Policy) bounds(attempt int) (lo, hi float64) {
	n := float64(p.nominal(attempt))
	fmax := float64(p.maxDelay())
	switch p.JitterMode {
	case JitterNone:
		lo, hi = n, n
	case JitterFull:
		lo, hi = 0, n
	case JitterEqual:
		lo, hi = n/2, n
	case JitterDecorrelated:
		prev := float64(p.base())
		if attempt > 1 {
			prev = float64(p.nominal(attempt - 1))
		}
		lo, hi = float64(p.base()), 3*prev
	default:
		j := p.jitter()
		lo, hi = n*(1-j), n*(1+j)
	}
	if hi > fmax {
		hi = fmax
	}
	if lo > hi {
		lo = hi
	}
	return lo, hi
}

// toDuration converts nanoseconds to a Duration, saturating at the largest Duration.
func toDuration(f float64) time.Duration {
	if !(f < float64(math.MaxInt64)) {
		return math.MaxInt64
	}
	if f <= 0 {
		return 0
	}
	return time.Duration(f)
}

// Bounds returns the lowest and highest delay Delay can return for attempt
// (jitter applied, capped at MaxDelay).
func (p Policy) Bounds(attempt int) (lo, hi time.Duration) {
	l, h := p.bounds(attempt)
	maxd := p.maxDelay()
	return min(toDuration(l), maxd), min(toDuration(h), maxd)
}

// Delay returns the jittered delay after attempt `attempt` (1-based) failed, drawn from
// p.Rand. It is deterministic given a deterministic Source, does not allocate, and
// always lies within Bounds(attempt).
func (p Policy) Delay(attempt int) time.Duration { return p.delay(attempt) }

func (p *Policy) delay(attempt int) time.Duration {
	lo, hi := p.bounds(attempt)
	d := lo
	if lo != hi {
		d = min(lo+(hi-lo)*p.rand(), hi)
	}
	return min(toDuration(d), p.maxDelay())
}

// RateLimitDelay returns how long to wait after the wait-th rate-limited failure
// (1-based, counting every rate-limited failure so far, whether or not its wait consumed
// an attempt) whose server asked for retryAfter: at least retryAfter and at least
// BaseDelay, plus up to 10% positive jitter so clients do not resynchronise. With no hint
// (retryAfter <= 0) it is Delay(wait), so that successive rate limits back off as the
// policy's schedule grows instead of hitting the limit again at a constant pace. Either
// way it is capped at MaxRateLimitWait (default 5 minutes), the one bound a caller sets on
// the dependency's Retry-After; below that cap it is never less than retryAfter, however
// many waits were already made.
func (p Policy) RateLimitDelay(retryAfter time.Duration, wait int) time.Duration {
	return p.rateLimitDelay(retryAfter, wait)
}

func (p *Policy) rateLimitDelay(retryAfter time.Duration, wait int) time.Duration {
	capd := p.maxRateLimitWait()
	if retryAfter <= 0 {
		return min(p.delay(wait), capd)
	}
	d := max(retryAfter, p.base())
	if d >= capd {
		return capd
	}
	f := float64(d) * (1 + 0.1*p.rand())
	return min(toDuration(f), capd)
}
