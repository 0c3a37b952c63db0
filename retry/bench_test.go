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

func BenchmarkDoSuccessBudgetBreaker(b *testing.B) {
	type benchKey struct{}
	ctx := Scope(context.WithValue(context.Background(), benchKey{}, 1))
	p := Policy{Budget: NewBudget(BudgetOptions{}), Breaker: NewBreaker(BreakerOptions{})}
	op := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := Do(ctx, p, op); err != nil {
			b.Fatal(err)
		}
	}
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
