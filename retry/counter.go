package retry

import (
	"math/rand/v2"
	"runtime"
	"sync/atomic"
)

// A counter is a sum that many goroutines add to at once without sharing a
// cache line: each add goes to one of several padded cells, picked at random,
// and a read adds the cells up. Adds stay cheap as cores are added, which one
// shared atomic or a mutex do not; reads are rare (on failures and scrapes)
// and cost one load per cell.
type counter struct {
	cells []cell
	mask  uint32
}

type cell struct {
	n atomic.Int64
	// One cell per 128 bytes: CPUs that fetch cache lines in pairs would
	// otherwise still share neighbouring cells.
	_ [120]byte
}

// maxCells bounds a counter's memory (128 bytes a cell) on large machines.
const maxCells = 64

func newCounter() counter {
	n := 8
	for n < 2*runtime.GOMAXPROCS(0) && n < maxCells {
		n <<= 1
	}
	return counter{cells: make([]cell, n), mask: uint32(n - 1)}
}

// add adds d. It does not read the clock and does not allocate.
func (c *counter) add(d int64) {
	c.cells[rand.Uint32()&c.mask].n.Add(d)
}

// load returns the sum of all adds that happened before it.
func (c *counter) load() int64 {
	var s int64
	for i := range c.cells {
		s += c.cells[i].n.Load()
	}
	return s
}
