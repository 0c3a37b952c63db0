package redrive

import (
	"testing"
	"time"
)

// The batch of a retention pass doubles while batches come back full and
// quickly, halves (not below the starting size) when one takes longer than
// retentionBatchTime, stays between the two, never passes the bound, and
// the pass ends on a short batch with the size back at the start.
func TestRetentionBatchAdapts(t *testing.T) {
	fast, slow, between := time.Millisecond, 2*retentionBatchTime, retentionBatchTime*3/4
	b := newBatchSizer(1000)
	var sizes []int
	step := func(n int, took time.Duration, wantMore bool) {
		t.Helper()
		if more := b.done(n, took); more != wantMore {
			t.Fatalf("after %d items in %v: pass goes on = %v, want %v", n, took, more, wantMore)
		}
		sizes = append(sizes, b.size)
	}
	for range 6 {
		step(b.size, fast, true)
	}
	step(b.size, slow, true)
	step(b.size, between, true)
	step(b.size, slow, true)
	step(b.size, slow, true)
	step(b.size, slow, true)
	step(b.size, slow, true)
	step(b.size-1, fast, false)
	want := []int{2000, 4000, 8000, 16000, 20000, 20000, 10000, 10000, 5000, 2500, 1250, 1000, 1000}
	if len(sizes) != len(want) {
		t.Fatalf("sizes %v, want %v", sizes, want)
	}
	for i := range want {
		if sizes[i] != want[i] {
			t.Fatalf("sizes %v, want %v", sizes, want)
		}
	}
	// A starting batch above the bound is kept: the bound only limits growth.
	b = newBatchSizer(50_000)
	if b.done(50_000, fast); b.size != 50_000 {
		t.Fatalf("size %d after a full batch from 50,000, want 50,000", b.size)
	}
}
