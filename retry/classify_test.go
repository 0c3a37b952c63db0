package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

type myErr struct{ code int }

func (e *myErr) Error() string { return fmt.Sprintf("my error %d", e.code) }

type classed struct{}

func (classed) Error() string                      { return "classed" }
func (classed) RetryClass() (Class, time.Duration) { return ClassRateLimited, 7 * time.Second }

func TestClassify(t *testing.T) {
	base := errors.New("boom")
	sentinel := errors.New("not found")
	tests := []struct {
		name string
		err  error
		want Outcome
	}{
		{"unknown", base, Outcome{Class: ClassRetryable}},
		{"final", Final(base), Outcome{Class: ClassFinal}},
		{"final wrapped", fmt.Errorf("ctx: %w", Final(base)), Outcome{Class: ClassFinal}},
		{"retryable", Retryable(base), Outcome{Class: ClassRetryable}},
		{"rate limited", RateLimited(base, 3*time.Second), Outcome{Class: ClassRateLimited, RetryAfter: 3 * time.Second}},
		{"rate limited negative", RateLimited(base, -3), Outcome{Class: ClassRateLimited}},
		{"outermost wins", Final(Retryable(base)), Outcome{Class: ClassFinal}},
		{"ClassedError", fmt.Errorf("w: %w", classed{}), Outcome{Class: ClassRateLimited, RetryAfter: 7 * time.Second}},
		{"deadline", context.DeadlineExceeded, Outcome{Class: ClassRetryable}},
		{"os deadline", os.ErrDeadlineExceeded, Outcome{Class: ClassRetryable}},
		{"conn refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, Outcome{Class: ClassRetryable}},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), Outcome{Class: ClassRetryable}},
		{"epipe", syscall.EPIPE, Outcome{Class: ClassRetryable}},
		{"unexpected EOF", io.ErrUnexpectedEOF, Outcome{Class: ClassRetryable}},
		{"dns not found", &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, Outcome{Class: ClassFinal}},
		{"dns temporary", &net.DNSError{Err: "server misbehaving", Name: "x", IsTemporary: true}, Outcome{Class: ClassRetryable}},
		{"dns timeout", &net.DNSError{Err: "timeout", Name: "x", IsTimeout: true}, Outcome{Class: ClassRetryable}},
		{"sentinel unknown", sentinel, Outcome{Class: ClassRetryable}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %+v, want %+v", tt.err, got, tt.want)
			}
		})
	}
	if Final(nil) != nil || Retryable(nil) != nil || RateLimited(nil, time.Second) != nil {
		t.Error("wrapping nil must give nil")
	}
	// errors.Is/As see through the wrappers.
	me := &myErr{code: 4}
	w := Final(fmt.Errorf("op: %w", me))
	if got, ok := errors.AsType[*myErr](w); !ok || got != me {
		t.Error("errors.As through Final failed")
	}
	if !errors.Is(Retryable(base), base) || Final(base).Error() != "boom" {
		t.Error("wrapper must be transparent")
	}
}

func TestNetworkEOF(t *testing.T) {
	if _, ok := Network(io.EOF); ok {
		t.Error("bare io.EOF must not be decided")
	}
	if o, ok := Network(&net.OpError{Op: "read", Err: io.EOF}); !ok || o.Class != ClassRetryable {
		t.Error("io.EOF from a connection must be retryable")
	}
	if _, ok := Network(errors.New("x")); ok {
		t.Error("unknown error decided")
	}
	if _, ok := Network(nil); ok {
		t.Error("nil decided")
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestNetworkTimeout(t *testing.T) {
	if o, ok := Network(fmt.Errorf("x: %w", timeoutErr{})); !ok || o.Class != ClassRetryable {
		t.Error("net.Error timeout must be retryable")
	}
}

func TestClassifierBuilders(t *testing.T) {
	notFound := errors.New("not found")
	c := Chain(ClassFinal,
		Is(notFound, ClassFinal),
		As[*myErr](ClassRateLimited),
		Func(func(err error) (Class, bool) { return ClassRetryable, err.Error() == "flaky" }),
		nil,
	)
	check := func(err error, want Class, wantOK bool) {
		t.Helper()
		o, ok := c(err)
		if o.Class != want || ok != wantOK {
			t.Errorf("%v: got %v %v, want %v %v", err, o.Class, ok, want, wantOK)
		}
	}
	check(fmt.Errorf("w: %w", notFound), ClassFinal, true)
	check(&myErr{1}, ClassRateLimited, true)
	check(errors.New("flaky"), ClassRetryable, true)
	check(errors.New("other"), ClassFinal, false)

	// Do uses the policy's classifier, but explicit wrappers win.
	p := Policy{Classifier: c}
	if o := p.classify(errors.New("other")); o.Class != ClassFinal {
		t.Errorf("policy classifier: %v", o.Class)
	}
	if o := p.classify(Retryable(notFound)); o.Class != ClassRetryable {
		t.Errorf("explicit must win: %v", o.Class)
	}
}

func TestClassText(t *testing.T) {
	for c := ClassRetryable; c <= ClassRateLimited; c++ {
		b, err := c.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var got Class
		if err := got.UnmarshalText(b); err != nil || got != c {
			t.Errorf("round trip %v: %v %v", c, got, err)
		}
	}
	if ClassRateLimited.String() != "rate_limited" || ClassFinal.String() != "final" || ClassRetryable.String() != "retryable" {
		t.Error("String")
	}
	if _, err := ParseClass("maybe"); err == nil {
		t.Error("ParseClass(maybe) no error")
	}
	if c, err := ParseClass("Rate-Limited"); err != nil || c != ClassRateLimited {
		t.Error("ParseClass(Rate-Limited)")
	}
	if _, err := Class(9).MarshalText(); err == nil {
		t.Error("MarshalText(9) no error")
	}
}

// TestPolicyClassify: the one classification shared by Do and the durable
// engine. Explicit wrappers win over the policy's classifier, and a Chain's
// unknown class holds for errors that no classifier of the chain knows.
func TestPolicyClassify(t *testing.T) {
	errTimeout := errors.New("timeout")
	errOther := errors.New("something else")
	p := Policy{Classifier: Chain(ClassFinal, Is(errTimeout, ClassRetryable))}
	tests := []struct {
		name string
		err  error
		want Outcome
	}{
		{"chain decides", fmt.Errorf("query: %w", errTimeout), Outcome{Class: ClassRetryable}},
		{"chain default holds", errOther, Outcome{Class: ClassFinal}},
		{"rate limited wrapper wins", RateLimited(errOther, 10*time.Millisecond), Outcome{Class: ClassRateLimited, RetryAfter: 10 * time.Millisecond}},
		{"retryable wrapper wins", Retryable(errOther), Outcome{Class: ClassRetryable}},
		{"final wrapper wins", Final(errTimeout), Outcome{Class: ClassFinal}},
		{"wrapped wrapper wins", fmt.Errorf("stage: %w", RateLimited(errTimeout, time.Second)), Outcome{Class: ClassRateLimited, RetryAfter: time.Second}},
		{"nil", nil, Outcome{}},
	}
	for _, tt := range tests {
		if got := p.Classify(tt.err); got != tt.want {
			t.Errorf("%s: Classify(%v) = %+v, want %+v", tt.name, tt.err, got, tt.want)
		}
	}
	// No classifier: the DefaultClassifier, unknown errors retryable.
	if got := (Policy{}).Classify(errOther); got.Class != ClassRetryable {
		t.Errorf("default policy: %v", got.Class)
	}
	if got := (Policy{}).Classify(context.DeadlineExceeded); got.Class != ClassRetryable {
		t.Errorf("default policy, deadline: %v", got.Class)
	}

	// Do applies the same function: the chain's default makes an unknown
	// error final (1 call), and a RateLimited error waits without consuming
	// the single attempt.
	p.MaxAttempts, p.BaseDelay, p.JitterMode = 3, time.Millisecond, JitterNone
	calls := 0
	_ = Do(context.Background(), p, func(context.Context) error { calls++; return errOther })
	if calls != 1 {
		t.Errorf("Do with the chain: %d calls for an unknown error, want 1", calls)
	}
	p.MaxAttempts = 1
	calls = 0
	err := Do(context.Background(), p, func(context.Context) error {
		calls++
		if calls < 3 {
			return RateLimited(errOther, time.Millisecond)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("Do with the chain, rate limited: %d calls, %v; want 3 calls and success", calls, err)
	}
}
