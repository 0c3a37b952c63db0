package tokenbucket

import (
	"testing"
	"time"
)

// TestBucket: a full bucket lets Burst through at once, then Rate per second, and says how
// long until the next token.
func TestBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := New(50, 50, t0)
	for i := range 50 {
		if ok, _ := b.Take(t0); !ok {
			t.Fatalf("take %d of the burst refused", i+1)
		}
	}
	ok, wait := b.Take(t0)
	if ok || wait != 20*time.Millisecond {
		t.Fatalf("empty bucket: ok %v wait %v, want false 20ms", ok, wait)
	}
	// Over 10 s at 1 ms steps exactly 500 more get through: the rate, not more.
	n := 0
	for i := 1; i <= 10000; i++ {
		if ok, _ := b.Take(t0.Add(time.Duration(i) * time.Millisecond)); ok {
			n++
		}
	}
	if n != 500 {
		t.Errorf("%d let through in 10 s at 50/s, want 500", n)
	}
	// Idle for a minute: it refills to the burst, no more.
	t1 := t0.Add(time.Minute)
	n = 0
	for range 100 {
		if ok, _ := b.Take(t1); ok {
			n++
		}
	}
	if n != 50 {
		t.Errorf("after a minute idle %d let through at once, want the burst 50", n)
	}
}
