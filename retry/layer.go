package retry

import (
	"context"
	"fmt"
	"strings"
)

type nestKey struct{}

// markers stored under nestKey.
const (
	markInside = 1 // ctx was passed by Do to its operation
	markScope  = 2 // ctx was made by Scope; Value(nestKey) of its child is markInside
)

type scopeCtx struct {
	context.Context
	inside context.Context
}

func (c *scopeCtx) Value(key any) any {
	if _, ok := key.(nestKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// Precomputed marked children of the two root contexts (immutable).
var (
	insideBackground = context.WithValue(context.Background(), nestKey{}, markInside)
	insideTODO       = context.WithValue(context.TODO(), nestKey{}, markInside)
)

// InNested reports whether ctx was passed by Do to its operation, that is whether a Do
// called with ctx would be nested (see the package documentation).
func InNested(ctx context.Context) bool {
	v, _ := ctx.Value(nestKey{}).(int)
	return v == markInside
}

// Scope returns a context for hot loops: Do called with it (or a context derived from it
// that adds no values) does not allocate to mark the context it passes to its operation.
// Do normally allocates one small context per call for that marker, except for
// context.Background() and context.TODO(). Scope does not itself make Do nested.
func Scope(ctx context.Context) context.Context {
	if InNested(ctx) {
		return ctx
	}
	return &scopeCtx{Context: ctx, inside: context.WithValue(ctx, nestKey{}, markInside)}
}

// Layer returns a context in which Do is nested, for an outer retry layer
// that is not itself a Do — redrive's durable engine passes one to every
// stage handler. Do called with it (and not Independent) makes one attempt
// per outer attempt and returns the error with its classification, leaving
// retrying to the outer layer, so the two layers do not multiply calls.
func Layer(ctx context.Context) context.Context {
	if InNested(ctx) {
		return ctx
	}
	return context.WithValue(ctx, nestKey{}, markInside)
}

// insideCtx returns the context Do passes to its operation.
func insideCtx(ctx context.Context) context.Context {
	switch ctx {
	case context.Background():
		return insideBackground
	case context.TODO():
		return insideTODO
	}
	switch v := ctx.Value(nestKey{}).(type) {
	case int:
		if v == markInside {
			return ctx
		}
	case *scopeCtx:
		if v == ctx { // only the scope itself; derived contexts may add deadlines
			return v.inside
		}
	}
	return context.WithValue(ctx, nestKey{}, markInside)
}

// nestedOnce is Do inside another Do: one attempt, classification preserved.
func nestedOnce[T any](ctx context.Context, p *Policy, op func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if p.Budget != nil {
		p.Budget.OnRequest()
	}
	if p.Breaker != nil {
		if err := p.Breaker.Allow(); err != nil {
			return zero, &Error{Layer: p.Name, Err: err, Cause: err, Reason: ReasonCircuitOpen}
		}
	}
	v, err := op(ctx)
	if err == nil {
		breakerRecord(p.Breaker, ctx, nil, Outcome{})
		return v, nil
	}
	o := p.classify(err)
	breakerRecord(p.Breaker, ctx, err, o)
	if _, ok := Explicit(err); ok && p.Name == "" {
		return zero, err
	}
	return zero, &classedError{err: err, class: o.Class, after: o.RetryAfter, layer: p.Name}
}

// Exhaustion says how an outer layer classifies the error of a layer that gave up because
// its own allowance ran out (attempts, rate-limit waits, MaxElapsed). The zero value is
// ExhaustedKeepClass.
type Exhaustion uint8

const (
	// ExhaustedKeepClass passes the last error's class through: an outer layer retries a
	// retryable error that an inner layer gave up on. The default.
	ExhaustedKeepClass Exhaustion = iota
	// ExhaustedFinal makes the error final for an outer layer: the inner layer owns that
	// failure and has already retried it as much as it should (ADR-001's infrastructure
	// layer under its workflow layer).
	ExhaustedFinal
	// ExhaustedRetryable makes the error retryable for an outer layer (for example a
	// rate-limited error, so the outer layer uses its own backoff instead of Retry-After).
	ExhaustedRetryable
)

var exhaustionNames = [...]string{"keep_class", "final", "retryable"}

// String returns "keep_class", "final" or "retryable".
func (x Exhaustion) String() string {
	if int(x) < len(exhaustionNames) {
		return exhaustionNames[x]
	}
	return fmt.Sprintf("Exhaustion(%d)", uint8(x))
}

// ParseExhaustion parses the String form of an Exhaustion (case-insensitive; "-" may
// replace "_"); "" is keep_class.
func ParseExhaustion(s string) (Exhaustion, error) {
	t := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	if t == "" {
		return ExhaustedKeepClass, nil
	}
	for i, n := range exhaustionNames {
		if t == n {
			return Exhaustion(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown exhaustion %q (want keep_class, final or retryable)", ErrInvalidPolicy, s)
}

// MarshalText implements encoding.TextMarshaler.
func (x Exhaustion) MarshalText() ([]byte, error) { return []byte(x.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseExhaustion.
func (x *Exhaustion) UnmarshalText(t []byte) error {
	v, err := ParseExhaustion(string(t))
	if err == nil {
		*x = v
	}
	return err
}

// exhausted returns the outcome an outer layer sees when this layer gave up for reason.
func (p *Policy) exhausted(o Outcome, reason string) Outcome {
	switch reason {
	case ReasonAttempts, ReasonRateLimitWaits, ReasonMaxElapsed:
	default:
		return o
	}
	switch {
	case o.Class == ClassFinal:
		return o
	case p.Exhausted == ExhaustedFinal:
		return Outcome{Class: ClassFinal}
	case p.Exhausted == ExhaustedRetryable:
		return Outcome{Class: ClassRetryable}
	}
	return o
}
