package redrive

import (
	"testing"
	"time"
)

// TestUnionLength: waits that overlap count once, and a wait running past the end
// counts up to the end.
func TestUnionLength(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := func(d float64) time.Time { return t0.Add(time.Duration(d * float64(time.Second))) }
	ws := []Wait{
		{From: s(5), Delay: time.Second},
		{From: s(0), Delay: 3 * time.Second},
		{From: s(1), Delay: time.Second},
		{From: s(2.5), Delay: time.Second},
		{From: s(9), Delay: time.Hour},
	}
	if got, want := unionLength(ws, s(9.5)), 5*time.Second; got != want {
		t.Fatalf("union %v, want %v (3.5 s, 1 s and 0.5 s)", got, want)
	}
	if got := unionLength(nil, s(1)); got != 0 {
		t.Fatalf("union of nothing: %v", got)
	}
}
