package retry

import (
	"context"
	"testing"
)

// BenchmarkLimiterPaced: Wait and Success at a known rate too high to wait for.
func BenchmarkLimiterPaced(b *testing.B) {
	l := NewLimiter(LimiterOptions{Rate: 1e12})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, err := l.Wait(ctx)
		if err != nil {
			b.Fatal(err)
		}
		p.Success()
	}
}

// BenchmarkLimiterSlowStart: Wait and Success in slow start, with a ramp too fast to
// wait for (its slot is reserved all the same) and with the window alone.
func BenchmarkLimiterSlowStart(b *testing.B) {
	for _, bc := range []struct {
		name string
		rate float64
	}{{"ramp", 1e12}, {"window", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			l := NewLimiter(LimiterOptions{InitialRate: bc.rate})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				p, err := l.Wait(ctx)
				if err != nil {
					b.Fatal(err)
				}
				p.Success()
			}
		})
	}
}
