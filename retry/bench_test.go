package retry

import (
	"context"
	"math/rand/v2"
	"testing"
)

func BenchmarkDoSuccess(b *testing.B) {
	ctx := context.Background()
	p := Policy{}
	op := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := Do(ctx, p, op); err != nil {
			b.Fatal(err)
		}
	}
}

// benchCtx is a request context made once with Scope, as a server would per
// connection: Do does not allocate its nesting marker.
func benchCtx() context.Context {
	type benchKey struct{}
	return Scope(context.WithValue(context.Background(), benchKey{}, 1))
}

// BenchmarkDoSuccessBudgetBreaker is the success path with the safe defaults:
// a shared Budget and Breaker, compared with BenchmarkDoSuccess.
func BenchmarkDoSuccessBudgetBreaker(b *testing.B) {
	ctx := benchCtx()
	p := Policy{Budget: NewBudget(BudgetOptions{}), Breaker: NewBreaker(BreakerOptions{})}
	op := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := Do(ctx, p, op); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoBudgetBreaker is BenchmarkDoSuccessBudgetBreaker with
// context.Background(), the plain policy's context.
func BenchmarkDoBudgetBreaker(b *testing.B) {
	ctx := context.Background()
	p := Policy{Budget: NewBudget(BudgetOptions{}), Breaker: NewBreaker(BreakerOptions{})}
	op := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := Do(ctx, p, op); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoBudgetBreakerParallel shares one Budget and Breaker between all
// goroutines (-cpu sets how many run at once): per-op time must not grow
// with the number of cores.
func BenchmarkDoBudgetBreakerParallel(b *testing.B) {
	p := Policy{Budget: NewBudget(BudgetOptions{}), Breaker: NewBreaker(BreakerOptions{})}
	op := func(context.Context) error { return nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := Do(ctx, p, op); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkDoSuccessParallel is the plain policy under RunParallel, the
// reference for BenchmarkDoBudgetBreakerParallel.
func BenchmarkDoSuccessParallel(b *testing.B) {
	p := Policy{}
	op := func(context.Context) error { return nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := Do(ctx, p, op); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkBudgetOnRequest is what every Do pays for a shared Budget.
func BenchmarkBudgetOnRequest(b *testing.B) {
	bu := NewBudget(BudgetOptions{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bu.OnRequest()
		}
	})
}

// BenchmarkBreakerSuccess is what every successful call pays for a shared
// Breaker: Allow, then Record(nil).
func BenchmarkBreakerSuccess(b *testing.B) {
	br := NewBreaker(BreakerOptions{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := br.Allow(); err != nil {
				b.Error(err)
				return
			}
			br.Record(nil)
		}
	})
}

// BenchmarkBreakerSuccessFailureRate is BenchmarkBreakerSuccess with the
// failure-rate rule on, which counts every call.
func BenchmarkBreakerSuccessFailureRate(b *testing.B) {
	br := NewBreaker(BreakerOptions{FailureRate: 0.5})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := br.Allow(); err != nil {
				b.Error(err)
				return
			}
			br.Record(nil)
		}
	})
}

func BenchmarkDelay(b *testing.B) {
	p := Policy{}
	b.ReportAllocs()
	var sum int64
	i := 0
	for b.Loop() {
		i++
		sum += int64(p.Delay(i&7 + 1))
	}
	_ = sum
}

func BenchmarkDelaySeeded(b *testing.B) {
	p := Policy{JitterMode: JitterDecorrelated, Rand: rand.New(rand.NewPCG(1, 2))}
	b.ReportAllocs()
	var sum int64
	i := 0
	for b.Loop() {
		i++
		sum += int64(p.Delay(i&7 + 1))
	}
	_ = sum
}

func BenchmarkDelayNoJitter(b *testing.B) {
	p := Policy{JitterMode: JitterNone}
	b.ReportAllocs()
	var sum int64
	i := 0
	for b.Loop() {
		i++
		sum += int64(p.Delay(i&7 + 1))
	}
	_ = sum
}
