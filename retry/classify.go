package retry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// Class is what a failure means for retrying. The zero value is ClassRetryable.
type Class uint8

const (
	// ClassRetryable: a transient failure; retry after a backoff delay. The zero value.
	ClassRetryable Class = iota
	// ClassFinal: retrying cannot help (bad input, permission denied); give up at once.
	ClassFinal
	// ClassRateLimited: the dependency asked to slow down; wait at least Outcome.RetryAfter.
	// Rate-limited waits do not consume attempts (see Policy.MaxRateLimitWaits).
	ClassRateLimited
)

var classNames = [...]string{"retryable", "final", "rate_limited"}

// String returns "retryable", "final" or "rate_limited".
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// ParseClass parses the String form of a Class (case-insensitive; "-" may replace "_",
// and "ratelimited", "fatal", "permanent", "transient" are accepted as aliases).
func ParseClass(s string) (Class, error) {
	switch strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_") {
	case "retryable", "transient", "retriable":
		return ClassRetryable, nil
	case "final", "fatal", "permanent":
		return ClassFinal, nil
	case "rate_limited", "ratelimited":
		return ClassRateLimited, nil
	}
	return 0, fmt.Errorf("retry: unknown class %q (want retryable, final or rate_limited)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (c Class) MarshalText() ([]byte, error) {
	if int(c) >= len(classNames) {
		return nil, fmt.Errorf("retry: invalid class %d", uint8(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseClass.
func (c *Class) UnmarshalText(t []byte) error {
	v, err := ParseClass(string(t))
	if err == nil {
		*c = v
	}
	return err
}

// Outcome is the classification of one failure.
type Outcome struct {
	// Class says whether and how to retry; the zero value is ClassRetryable.
	Class Class
	// RetryAfter is the wait the dependency asked for (ClassRateLimited only); 0 if none.
	RetryAfter time.Duration
}

// Classifier classifies an error. decisive is false when the classifier has no opinion,
// letting Chain try the next one; o is then ignored by Chain (Do still uses it, so a
// non-decisive classifier should return the zero Outcome, ClassRetryable).
type Classifier func(err error) (o Outcome, decisive bool)

// ClassedError is implemented by errors that carry their own classification. Explicit
// finds it anywhere in an error's chain; the outermost one wins. The wrappers Final,
// Retryable and RateLimited, and *Error, implement it.
type ClassedError interface {
	error
	RetryClass() (Class, time.Duration)
}

type classedError struct {
	err   error
	class Class
	after time.Duration
	layer string // the Name of the nested layer that made the attempt, if any
}

func (e *classedError) Error() string {
	if e.layer != "" {
		return e.layer + ": " + e.err.Error()
	}
	return e.err.Error()
}

func (e *classedError) Unwrap() error                      { return e.err }
func (e *classedError) RetryClass() (Class, time.Duration) { return e.class, e.after }

// Final marks err as final: retrying cannot help. errors.Is/As still see err. Final(nil) is nil.
func Final(err error) error {
	if err == nil {
		return nil
	}
	return &classedError{err: err, class: ClassFinal}
}

// Retryable marks err as retryable. Retryable(nil) is nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &classedError{err: err, class: ClassRetryable}
}

// RateLimited marks err as rate-limited: retry no sooner than after (0 = no hint; the
// policy's backoff applies). RateLimited(nil, d) is nil.
func RateLimited(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return &classedError{err: err, class: ClassRateLimited, after: max(after, 0)}
}

// Explicit classifies errors that carry a classification: the Final, Retryable and
// RateLimited wrappers and any ClassedError in the chain (the outermost wins).
func Explicit(err error) (Outcome, bool) {
	if err == nil {
		return Outcome{}, false
	}
	if ce, ok := errors.AsType[ClassedError](err); ok {
		c, d := ce.RetryClass()
		return Outcome{Class: c, RetryAfter: d}, true
	}
	return Outcome{}, false
}

// Context classifies context.DeadlineExceeded (and os.ErrDeadlineExceeded) as retryable:
// an attempt that ran out of its own time may succeed next time. Do itself stops at once
// when the caller's context is done, whatever the classification.
func Context(err error) (Outcome, bool) {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return Outcome{Class: ClassRetryable}, true
	}
	return Outcome{}, false
}

// Network classifies network failures: timeouts (net.Error), ECONNREFUSED, ECONNRESET,
// ECONNABORTED, EPIPE, ETIMEDOUT, EHOSTUNREACH, ENETUNREACH, temporary or timed-out DNS
// errors, io.ErrUnexpectedEOF and io.EOF from a connection are retryable; a DNS
// "no such host" and TLS certificate verification failures are final. Other errors are
// not decided.
func Network(err error) (Outcome, bool) {
	if err == nil {
		return Outcome{}, false
	}
	retry, final := Outcome{Class: ClassRetryable}, Outcome{Class: ClassFinal}
	if dns, ok := errors.AsType[*net.DNSError](err); ok {
		switch {
		case dns.IsTimeout || dns.IsTemporary:
			return retry, true
		case dns.IsNotFound:
			return final, true
		}
		return retry, true
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return final, true
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return retry, true
	}
	for _, e := range [...]error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EPIPE, syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, io.ErrUnexpectedEOF} {
		if errors.Is(err, e) {
			return retry, true
		}
	}
	if errors.Is(err, io.EOF) {
		if _, ok := errors.AsType[*net.OpError](err); ok {
			return retry, true
		}
		if _, ok := errors.AsType[*url.Error](err); ok {
			return retry, true
		}
	}
	return Outcome{}, false
}

// Chain returns a classifier trying cs in order; the first decisive answer wins. If none
// is decisive it returns Outcome{Class: unknown} and false.
func Chain(unknown Class, cs ...Classifier) Classifier {
	cs = append([]Classifier(nil), cs...)
	return func(err error) (Outcome, bool) {
		for _, c := range cs {
			if c == nil {
				continue
			}
			if o, ok := c(err); ok {
				return o, true
			}
		}
		return Outcome{Class: unknown}, false
	}
}

// Is returns a classifier giving class c to errors for which errors.Is(err, target).
func Is(target error, c Class) Classifier {
	return func(err error) (Outcome, bool) {
		if errors.Is(err, target) {
			return Outcome{Class: c}, true
		}
		return Outcome{}, false
	}
}

// As returns a classifier giving class c to errors with an E in their chain (errors.AsType).
func As[E error](c Class) Classifier {
	return func(err error) (Outcome, bool) {
		if _, ok := errors.AsType[E](err); ok {
			return Outcome{Class: c}, true
		}
		return Outcome{}, false
	}
}

// Func adapts f, which returns a class and whether it decided, to a Classifier.
func Func(f func(error) (Class, bool)) Classifier {
	return func(err error) (Outcome, bool) {
		if c, ok := f(err); ok {
			return Outcome{Class: c}, true
		}
		return Outcome{}, false
	}
}

// DefaultClassifier is Chain(ClassRetryable, Explicit, Context, Network): explicit
// classifications first, then context deadlines and network errors; unknown errors are
// retryable. It is the classifier of a Policy whose Classifier is nil.
var DefaultClassifier Classifier = Chain(ClassRetryable, Explicit, Context, Network)

// Classify classifies err with DefaultClassifier; unknown errors are retryable.
func Classify(err error) Outcome {
	o, _ := DefaultClassifier(err)
	return o
}

// Classify classifies err the way Do does, and is the one classification that a layer
// retrying on p's behalf (redrive's durable engine) must use so that both agree:
// explicit classifications (Final, Retryable, RateLimited, any ClassedError) always win;
// other errors go to p.Classifier (DefaultClassifier if nil), whose answer holds whether
// or not it was decisive, so the unknown class of a Chain is the class of errors it does
// not know. Classify(nil) is the zero Outcome.
func (p Policy) Classify(err error) Outcome { return p.classify(err) }

func (p *Policy) classify(err error) Outcome {
	if err == nil {
		return Outcome{}
	}
	if o, ok := Explicit(err); ok {
		return o
	}
	c := p.Classifier
	if c == nil {
		c = DefaultClassifier
	}
	o, _ := c(err)
	return o
}
